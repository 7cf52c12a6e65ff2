"""argparse types for the numbers of the command line (``lnrepro`` and ``lnrepro bench``): a bad value is
argparse's one-line usage error naming the option, not a traceback from the stage that would use it."""

from __future__ import annotations

import argparse
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
