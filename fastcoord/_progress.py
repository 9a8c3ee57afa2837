"""A dependency-free progress bar for long command-line jobs (stderr, TTY or not)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, width: int = 30, stream=None) -> None:
        self.total = max(1, total)
        self.label = label
        self.width = width
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self.done = 0
        # Into a file (a redirected stderr, a CI log) a redrawn bar is one endless line:
        # there it is a line at each tenth instead
        isatty = getattr(self.stream, "isatty", None)
        self._tty = bool(isatty and isatty())
        self._tenth = -1
        self._line_open = False

    def update(self, done: int) -> None:
        self.done = done
        now = time.perf_counter()
        if not self._tty:
            tenth = min(10, done * 10 // self.total)
            if tenth != self._tenth:
                self._tenth = tenth
                self._draw(now)
            return
        if now - self._last_draw >= 0.1 or done >= self.total:
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = now - self.start
        text = f"  {self.label} [{bar}] {frac * 100:5.1f}% {elapsed:5.1f}s"
        if self._tty:
            end = "\n" if frac >= 1.0 else ""
            self.stream.write(f"\r{text}{end}")
            self._line_open = not end
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def stop(self) -> None:
        """End the bar's line where it is (a job that did not finish: not drawn full)."""
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False

    def close(self) -> None:
        if self.done < self.total or (not self._tty and self._tenth < 10):
            self.done = self.total
            self._tenth = 10
            self._draw(time.perf_counter())
