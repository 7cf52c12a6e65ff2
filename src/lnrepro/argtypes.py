"""argparse types for the numbers of the command line (``lnrepro`` and ``lnrepro bench``): a bad value is
argparse's one-line usage error naming the option, not a traceback from the stage that would use it."""

from __future__ import annotations

import argparse
import math
from typing import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """The argparse type of a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum}, got {value}")
        return value

    return parse


count = at_least(1)  # threads, repetitions
size = at_least(0)  # bytes


def positive(text: str) -> float:
    """The argparse type of a finite number above 0 (a time: ``--minutes``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
    return value


def sha256_hex(text: str) -> str:
    """The argparse type of a SHA-256 digest: 64 hexadecimal digits (lower case, as ``io.file_sha256`` gives)."""
    value = text.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise argparse.ArgumentTypeError(f"expected a SHA-256 digest (64 hexadecimal digits), got {text!r}")
    return value
