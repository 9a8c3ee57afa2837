"""The server's heartbeat lane, pure twin of fastcoord/server/_native/lane.pyx (read that
module's docstring for the design): connections whose reads are plain heartbeats,
served from one epoll set that the event loop watches, so that one callback answers
every ready connection instead of one event-loop trip per read.

The same steps as the native lane, in Python: `os.read` of one read's bytes, the
HeartbeatReader on them, `os.write` of the answers, and a hand-back to the owner
(`on_return(key, rest, unsent, error)`) at the first read that holds anything else.
"""
from __future__ import annotations

import os
import select
import time
from typing import Any, Callable, Dict, List, Optional

from .wire import check_ident

__all__ = ["HeartbeatLane"]

if not hasattr(select, "epoll"):
    raise ImportError("the heartbeat lane needs epoll (Linux)")

MAX_EVENTS = 256        # ready connections served per poll (the rest: next poll)
READ_SIZE = 65536       # one read; a heartbeat frame is about 60-100 bytes
FULL_READS_MAX = 16     # full reads in one serve before handing the socket back
POLL_BUDGET_S = 0.001   # one poll call serves batches for at most this long

OnReturn = Callable[[Any, bytes, bytes, Optional[BaseException]], object]


class HeartbeatLane:
    def __init__(self, reader: Callable[[bytes, Callable[[bytes], object]], int],
                 on_return: OnReturn) -> None:
        if not callable(reader):
            raise TypeError(f"reader must be a HeartbeatReader, got {type(reader).__name__}")
        if not callable(on_return):
            raise TypeError(f"on_return must be callable, got {type(on_return).__name__}")
        self.reader = reader
        self.on_return = on_return
        self.conns: Dict[int, Any] = {}             # fd -> its owner's key
        self.hosts: Dict[int, Optional[bytes]] = {}  # fd -> peer address, JSON (request log)
        self.idents: Dict[int, Any] = {}            # fd -> (client id, client host) or None
        self.last_read: Dict[int, float] = {}       # fd -> time.monotonic() of its last read
        self.reads = 0
        self.polls = 0          # batches served (epoll waits that found some)
        self.handbacks = 0
        self._epoll: Optional[select.epoll] = select.epoll()

    def fileno(self) -> int:
        """The epoll descriptor, readable when a connection is."""
        return self._open().fileno()

    def __len__(self) -> int:
        return len(self.conns)

    def __contains__(self, fd: object) -> bool:
        return fd in self.conns

    def _open(self) -> select.epoll:
        if self._epoll is None:
            raise ValueError("the lane is closed")
        return self._epoll

    def add(self, fd: int, key: Any, host: Optional[bytes] = None, ident=None) -> None:
        """Serve socket `fd` (non-blocking, its owner's reading paused); `key` is what
        on_return gets when it leaves; `host` (bytes: the peer's address as JSON text)
        goes in its request-log lines when the reader logs; `ident`, the connection's
        (client id, client host), lets the reader answer its steady
        ConsumerGroupHeartbeats."""
        epoll = self._open()
        if type(fd) is not int:
            raise TypeError(f"fd must be an int, got {type(fd).__name__}")
        if fd < 0:
            raise ValueError(f"fd must be a file descriptor, got {fd}")
        if fd in self.conns:
            raise ValueError(f"fd {fd} is already in the lane")
        if host is not None and type(host) is not bytes:
            raise TypeError(f"host must be bytes (JSON text) or None, got {type(host).__name__}")
        check_ident(ident)
        epoll.register(fd, select.EPOLLIN | select.EPOLLET)
        self.conns[fd] = key
        self.hosts[fd] = host
        self.idents[fd] = ident
        self.last_read[fd] = time.monotonic()

    def remove(self, fd: int) -> bool:
        """Stop serving `fd` (no on_return); False if it was not in the lane."""
        if self._epoll is None or fd not in self.conns:
            return False
        self._drop(fd)
        return True

    def _drop(self, fd: int) -> Any:
        try:
            self._epoll.unregister(fd)
        except OSError:
            pass                                    # already closed: the kernel dropped it
        del self.last_read[fd]
        del self.hosts[fd]
        del self.idents[fd]
        return self.conns.pop(fd)

    def last_active(self, fd: int) -> float:
        """time.monotonic() of fd's last read in the lane (or of its entry)."""
        if fd not in self.conns:
            raise KeyError(fd)
        return self.last_read[fd]

    def idle(self, before: float) -> List[Any]:
        """The keys of the connections whose last read in the lane (or entry) was before
        `before` (time.monotonic() seconds)."""
        return [key for fd, key in self.conns.items() if self.last_read[fd] < before]

    def poll(self) -> int:
        """Serve the connections ready now (without waiting), again while more become
        ready, for up to POLL_BUDGET_S: how many were served. (Under load, requests
        arrive while a batch is served: taking them in the same call saves a whole turn
        of the event loop each; the budget keeps its timers and other connections
        served meanwhile.)"""
        total = 0
        until = time.monotonic() + POLL_BUDGET_S
        while self._epoll is not None:
            try:
                ready = self._epoll.poll(0, MAX_EVENTS)
            except InterruptedError:
                return total
            if not ready:
                break
            total += len(ready)
            self.polls += 1
            self._serve_batch(ready)
            if time.monotonic() >= until:
                break
        return total

    def _serve_batch(self, ready) -> None:
        failure: Optional[Exception] = None
        for fd, _ in ready:
            if fd not in self.conns:    # a hand-back earlier in this batch may have removed it
                continue
            # Edge-triggered: a connection skipped now would not be reported again before
            # its next request, so one failure must not cost the others their turn.
            try:
                self._serve(fd)
            except Exception as exc:
                if failure is None:
                    failure = exc
        if failure is not None:
            raise failure               # for the event loop's exception handler

    def _serve(self, fd: int) -> None:
        """Read `fd` until drained, answering each read (edge-triggered: what is left
        unread now would not be reported again until more arrives)."""
        for _ in range(FULL_READS_MAX):
            if self._serve_read(fd) < READ_SIZE:   # drained, or handed back (-1)
                return
        self._hand_back(fd, b"", b"", None)         # the owner's reading takes the rest

    def _serve_read(self, fd: int) -> int:
        """One read and its answers: the bytes read (all answered and sent), else -1
        (nothing to read, or the socket was handed back)."""
        try:
            data = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return -1
        except OSError as exc:
            self._hand_back(fd, b"", b"", exc)
            return -1
        if not data:                    # end of stream: the owner's reading sees it
            self._hand_back(fd, b"", b"", None)
            return -1
        self.reads += 1
        self.last_read[fd] = time.monotonic()
        answers: List[bytes] = []
        error: Optional[BaseException] = None
        try:
            pos = self.reader(data, answers.append, self.hosts[fd], self.idents[fd])
        except Exception as exc:        # the answers before it still go out
            error = exc
            pos = len(data)             # and nothing of this read is handed on
        out = b"".join(answers)
        sent = 0
        if out:
            try:
                sent = os.write(fd, out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._hand_back(fd, b"", b"", exc)
                return -1
        if pos < len(data) or sent < len(out) or error is not None:
            self._hand_back(fd, data[pos:], out[sent:], error)
            return -1
        return len(data)

    def _hand_back(self, fd: int, rest: bytes, unsent: bytes,
                   error: Optional[BaseException]) -> None:
        key = self._drop(fd)
        self.handbacks += 1
        self.on_return(key, rest, unsent, error)

    def close(self) -> None:
        """Stop serving every connection (no on_return) and free the epoll set."""
        self.conns.clear()
        self.last_read.clear()
        self.hosts.clear()
        self.idents.clear()
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
