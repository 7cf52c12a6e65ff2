"""How the report writes a number (lnrepro.analysis.numbers): three significant digits, intervals with two,
a real minus sign."""

from __future__ import annotations

import math

import pytest

from lnrepro.analysis.numbers import MINUS, interval, sig, signed


@pytest.mark.parametrize("value,text", [
    (0.023551, "0.0236"), (34.1234, "34.1"), (-1.2345, f"{MINUS}1.23"), (12345.6, "12300"), (10.0, "10"),
    (7, "7"), (1e-5, "0.0000100"), (math.nan, "—"), (-0.0, "0")])
def test_sig_writes_three_significant_digits(value, text):
    assert sig(value) == text


def test_signed_writes_the_sign():
    assert (signed(1.352), signed(-0.06083), signed(0)) == ("+1.35", f"{MINUS}0.0608", "0")


@pytest.mark.parametrize("args,text", [
    ((0.02355, -0.7001, 0.7472), f"0.02 [{MINUS}0.70, 0.75]"),  # the estimate to the ends' precision
    ((34.123, 33.1, 35.2), "34 [33, 35]"),
    ((1.0, 0.999, 1.001), "1.00 [0.999, 1.00]"),  # more digits where two would not tell the ends apart
    ((2.5, math.nan, math.nan), "2.5"),
    ((math.nan, 1.0, 2.0), "—")])
def test_interval_writes_its_ends_at_two_digits(args, text):
    assert interval(*args) == text
