"""Argument types shared by the `fastcoord` subcommands' parsers (standard library
only: every command builds every parser)."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1. Anything else, a word included, is
    refused with a message that shows what was given (argparse's own message for a
    ValueError would name this function instead)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value
