"""Exact and certified arithmetic for reported privacy parameters.

The accountant's ε is a sum of terms such as ln((1+γ)/(1−γ)), k/t and −ln(1 − e^(−q·h))
(Lemmas 6 and 11 of arXiv 1906.08320). Computed in binary64 from a float p = e^(−1/t), the
term k·ln(1/p) alone can come out about 10^−8 above its exact value k/t. Here every term is
an exact rational or a certified bound, as a :class:`fractions.Fraction`:

* rational terms (k/t, t·ln β's factor t, the BBGN noise's k·γ) are exact;
* logarithms and exponentials are enclosed with :mod:`decimal` at :data:`PRECISION`
  significant digits. Decimal's ``ln`` and ``exp`` are correctly rounded (round half even),
  so the neighbour one unit in the last place away from the result, in the chosen
  direction, is a rigorous bound; arguments are rounded in the safe direction first.

:func:`float_up` turns a bound into the smallest binary64 value not below it (what the JSON
``epsilon`` holds: a float target is then met iff the exact bound meets it);
:func:`decimal_up` gives the digits of the bound rounded up (``epsilon_exact``);
:func:`display_down` rounds down, for display only.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

from cloaknet.errors import ParameterError

__all__ = [
    "PRECISION",
    "decimal_up",
    "display_down",
    "exp_upper",
    "float_up",
    "ln_lower",
    "ln_upper",
    "swap_epsilon_upper",
    "tail_epsilon_upper",
]

#: Significant decimal digits of the enclosures.
PRECISION = 50


def _context(rounding: str, digits: int = PRECISION) -> decimal.Context:
    return decimal.Context(prec=digits, rounding=rounding, Emin=-999_999, Emax=999_999)


def _decimal(value: Fraction, rounding: str, digits: int = PRECISION) -> Decimal:
    """``value`` rounded to ``digits`` significant digits in the direction ``rounding``."""
    ctx = _context(rounding, digits)
    return ctx.divide(Decimal(value.numerator), Decimal(value.denominator))


def _positive(value: Fraction, name: str) -> Fraction:
    if not isinstance(value, Fraction | int) or isinstance(value, bool) or value <= 0:
        raise ParameterError(f"{name} must be a positive rational, got {value!r}")
    return Fraction(value)


def ln_upper(value: Fraction) -> Fraction:
    """A rational >= ln(``value``) within 10^−(PRECISION−1) relative (``value`` > 0)."""
    x = _positive(value, "value")
    if x == 1:
        return Fraction(0)
    ctx = _context(decimal.ROUND_HALF_EVEN)
    nearest = ctx.ln(_decimal(x, decimal.ROUND_CEILING))
    return Fraction(nearest.next_plus(ctx))


def ln_lower(value: Fraction) -> Fraction:
    """A rational <= ln(``value``) within 10^−(PRECISION−1) relative (``value`` > 0)."""
    x = _positive(value, "value")
    if x == 1:
        return Fraction(0)
    ctx = _context(decimal.ROUND_HALF_EVEN)
    low = _decimal(x, decimal.ROUND_FLOOR)
    if low <= 0:  # pragma: no cover - below 10^-999999
        raise ParameterError(f"value {x} is too small to enclose")
    return Fraction(ctx.ln(low).next_minus(ctx))


def exp_upper(value: Fraction) -> Fraction:
    """A rational >= e^``value`` within 10^−(PRECISION−1) relative."""
    ctx = _context(decimal.ROUND_HALF_EVEN)
    return Fraction(ctx.exp(_decimal(Fraction(value), decimal.ROUND_CEILING)).next_plus(ctx))


def swap_epsilon_upper(gamma: float | Fraction) -> Fraction:
    """A rational >= ln((1+γ)/(1−γ)) = ln β for the exact value of ``gamma`` in (0, 1)
    (Lemma 3 of arXiv 1906.08320, ``lemma:pair_pointwise_DP``)."""
    g = Fraction(gamma)
    if not 0 < g < 1:
        raise ParameterError(f"gamma must lie in (0, 1), got {gamma!r}")
    return ln_upper((1 + g) / (1 - g))


def tail_epsilon_upper(noise_q: float | Fraction, honest: int) -> Fraction:
    """A rational >= −ln(1 − e^(−q·h)), the ε term of the pre-randomizer's tail (Lemmas 11
    and 13 of arXiv 1906.08320), for the exact values of q in (0, 1] and h >= 1."""
    q = Fraction(noise_q)
    if not 0 < q <= 1 or honest < 1:
        raise ParameterError(f"need 0 < q <= 1 and h >= 1, got q = {noise_q!r}, h = {honest}")
    below_one = 1 - exp_upper(-q * honest)  # <= 1 − e^(−q·h)
    if below_one <= 0:  # pragma: no cover - q·h below 10^-49
        raise ParameterError(f"q·h = {q * honest} is too small to enclose")
    return -ln_lower(below_one)


def float_up(value: Fraction) -> float:
    """The smallest binary64 value >= ``value`` (``inf`` beyond the float range)."""
    x = Fraction(value)
    try:
        near = float(x)  # correctly rounded
    except OverflowError:
        return math.inf if x > 0 else -math.inf
    return near if Fraction(near) >= x else math.nextafter(near, math.inf)


def decimal_up(value: Fraction, digits: int = 30) -> str:
    """``value`` rounded *up* to ``digits`` significant digits, as a plain decimal string
    (an upper bound; equal to ``value`` when it has at most ``digits`` digits)."""
    d = _decimal(Fraction(value), decimal.ROUND_CEILING, digits)
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def display_down(value: Fraction | float, digits: int = 6) -> str:
    """``value`` rounded *down* to ``digits`` (<= 15) significant digits, for display only:
    an ε of 0.9999999996 shows as 0.999999, never as a value above the exact one."""
    if not 1 <= digits <= 15:
        raise ParameterError(f"digits must lie in [1, 15], got {digits}")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    x = Fraction(value)
    d = _decimal(x, decimal.ROUND_FLOOR, digits) if x else Decimal(0)
    return format(float(d), f".{digits}g")
