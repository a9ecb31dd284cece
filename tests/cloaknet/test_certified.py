"""Certified enclosures of the accountant's logarithms, and the roundings of reported ε."""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cloaknet import certified
from cloaknet.errors import ParameterError

positive = st.fractions(min_value=Fraction(1, 10**30), max_value=10**30).filter(lambda x: x > 0)


def reference_ln(x: Fraction) -> Fraction:
    """ln x to 120 digits (far beyond the enclosures' 50)."""
    ctx = decimal.Context(prec=120)
    return Fraction(ctx.ln(ctx.divide(decimal.Decimal(x.numerator),
                                      decimal.Decimal(x.denominator))))


@given(positive)
def test_logarithm_enclosures(x: Fraction) -> None:
    low, high, ref = certified.ln_lower(x), certified.ln_upper(x), reference_ln(x)
    assert low <= ref <= high
    assert high - low <= Fraction(1, 10**47) * max(Fraction(1), abs(ref))


@given(st.fractions(min_value=-50, max_value=50))
def test_exponential_enclosure(x: Fraction) -> None:
    ctx = decimal.Context(prec=120)
    ref = Fraction(ctx.exp(ctx.divide(decimal.Decimal(x.numerator),
                                      decimal.Decimal(x.denominator))))
    upper = certified.exp_upper(x)
    assert ref <= upper <= ref * (1 + Fraction(1, 10**47))


@given(st.fractions(min_value=Fraction(-10**6), max_value=10**6))
def test_roundings(x: Fraction) -> None:
    up = certified.float_up(x)
    assert Fraction(up) >= x and Fraction(math.nextafter(up, -math.inf)) < x
    assert Fraction(certified.decimal_up(x)) >= x
    assert Fraction(certified.decimal_up(x, 40)) - x <= abs(x) * Fraction(1, 10**39) + 0
    shown = certified.display_down(x)
    assert Fraction(shown) <= x


def test_display_rounds_down_only() -> None:
    assert certified.display_down(Fraction(9999999996, 10**10)) == "0.999999"
    assert certified.display_down(Fraction(1)) == "1"
    assert certified.display_down(0.0) == "0"
    assert certified.display_down(math.inf) == "inf"
    assert certified.decimal_up(Fraction(1, 3), 5) == "0.33334"
    assert certified.decimal_up(Fraction(5, 2)) == "2.5"
    with pytest.raises(ParameterError):
        certified.display_down(1.0, 16)


def test_epsilon_terms_and_their_domains() -> None:
    gamma = 0.25
    assert certified.swap_epsilon_upper(gamma) >= reference_ln(Fraction(5, 3))
    tail = certified.tail_epsilon_upper(Fraction(1, 100), 2000)
    assert float(tail) == pytest.approx(-math.log(-math.expm1(-20.0)), rel=1e-12)
    for bad in (0.0, 1.0, -0.5):
        with pytest.raises(ParameterError):
            certified.swap_epsilon_upper(bad)
    with pytest.raises(ParameterError):
        certified.tail_epsilon_upper(Fraction(0), 10)
    with pytest.raises(ParameterError):
        certified.ln_upper(Fraction(0))
