"""Log lines of bounded length: ids and names come from clients, and a client may send
ones of megabytes (Kafka bounds none of them), each logged by several lines of a
request. `ClipFilter` on a handler shortens each long string argument, then the whole
message, keeping both ends and saying how much it left out."""
from __future__ import annotations

import logging

__all__ = ["ClipFilter"]


def clip(text: str, limit: int) -> str:
    """`text`, or its first and last characters around a note of how many are left out,
    within about `limit` characters."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 16, 1)
    return f"{text[:keep]}...({len(text) - 2 * keep} characters)...{text[-keep:]}"


class ClipFilter(logging.Filter):
    """Shortens a record's str arguments past `arg_limit` characters and its message
    past `line_limit` (a traceback is left whole: it is rate limited where it is
    logged). Never drops a record."""

    def __init__(self, arg_limit: int = 256, line_limit: int = 4096) -> None:
        super().__init__()
        if arg_limit < 64 or line_limit < arg_limit:
            raise ValueError(f"need 64 <= arg_limit <= line_limit, got {arg_limit}, {line_limit}")
        self.arg_limit = arg_limit
        self.line_limit = line_limit

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        limit = self.arg_limit
        if isinstance(args, tuple) and any(isinstance(a, str) and len(a) > limit for a in args):
            record.args = tuple(clip(a, limit) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict) and any(isinstance(a, str) and len(a) > limit
                                            for a in args.values()):
            record.args = {k: clip(a, limit) if isinstance(a, str) else a
                           for k, a in args.items()}
        if isinstance(record.msg, str) and len(record.msg) > self.line_limit:
            record.msg = clip(record.msg, self.line_limit)
        try:
            message = record.getMessage()
        except Exception:
            return True     # (logging reports a bad format itself)
        if len(message) > self.line_limit:
            record.msg, record.args = clip(message, self.line_limit), None
        return True
