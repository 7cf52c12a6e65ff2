"""How the report writes a number or a variant: as a reader writes one in a results section, not as the CSVs keep
it. The one module of formatting helpers that the statistics, sections and rendering import.

At most three significant digits (``sig``), an interval as ``0.02 [−0.70, 0.75]`` with its ends at two significant
digits unless more are needed to tell them apart and the estimate to the ends' precision (``interval``), and a
real minus sign (U+2212). Integers are exact counts (epochs, updates, seeds) and are written whole. The CSVs under
``tables/`` keep full precision: only the page and the sentences round.
"""

from __future__ import annotations

import math
import re

from ..norms import NORMS

MINUS = "\u2212"
DIGITS = 3  # significant digits of a number on its own
END_DIGITS = 2  # significant digits of an interval's ends, unless more are needed to tell them apart
MAX_DIGITS = 4  # never more, even to tell two ends apart


def _decimals(v: float, digits: int) -> int:
    """Decimals that show ``v`` to ``digits`` significant digits (none for |v| >= 10 ** (digits - 1))."""
    if v == 0 or not math.isfinite(v):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(v))))


def _fixed(v: float, decimals: int) -> str:
    """``v`` with ``decimals`` decimals, large numbers rounded to their leading significant digits, a real minus."""
    if decimals == 0 and abs(v) >= 10 ** DIGITS:
        v = round(v, DIGITS - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}"
    if float(text) == 0:
        text = text.lstrip("-")
    return text.replace("-", MINUS)


def sig(v: float, digits: int = DIGITS) -> str:
    """A number: ``digits`` significant digits ("0.0236", "34.1", "12300", "−1.2"), integers whole; "—" for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, (int,)) or (float(v).is_integer() and abs(v) < 10 ** 6 and digits >= DIGITS):
        return str(int(v)).replace("-", MINUS)
    if math.isinf(v):
        return ("" if v > 0 else MINUS) + "∞"
    text = f"{float(v):.{digits}g}"
    if "e" in text:  # beyond .g's fixed range: fixed decimals instead
        return _fixed(float(v), _decimals(float(v), digits))
    return text.replace("-", MINUS)


def signed(v: float, digits: int = DIGITS) -> str:
    """A difference: its sign always written ("+1.35", "−0.05")."""
    text = sig(v, digits)
    return f"+{text}" if math.isfinite(v) and v > 0 else text


def interval(v: float, lo: float, hi: float) -> str:
    """An estimate with its interval: "0.02 [−0.70, 0.75]"; the estimate alone without ends, "—" without one."""
    if v is None or not math.isfinite(v):
        return "—"
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return sig(v)
    digits = END_DIGITS
    while digits < MAX_DIGITS and lo != hi and sig(lo, digits) == sig(hi, digits):
        digits += 1
    ends = [_fixed(x, _decimals(x, digits)) for x in (lo, hi)]
    places = max(_decimals(x, digits) for x in (lo, hi) if x != 0) if (lo, hi) != (0, 0) else 0
    estimate = _fixed(v, min(places, _decimals(v, DIGITS)))
    return f"{estimate} [{ends[0]}, {ends[1]}]"


# A sentence ends at a full stop followed by a capital: "0.809" and "lr_max 0.002," stay whole.
def norm_label(norm: str) -> str:
    """A norm variant as the registry labels it ("Post-LN"); an unregistered one by its name."""
    return NORMS[norm].label if norm in NORMS else norm


SENTENCE_END = re.compile(r"(?<=[.])\s+(?=[A-Z(])")


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (the whole text when it has one)."""
    return SENTENCE_END.split(text.strip(), 1)[0]
