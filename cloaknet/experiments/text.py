"""Numbers and tables for the Markdown reports: the formatting rules in one place."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "delta_label",
    "fmt",
    "integral",
    "markdown_table",
    "n_label",
    "shorten",
    "span",
]


def fmt(value: Any, digits: int = 3) -> str:
    """Human formatting for tables: floats with ``digits`` significant digits (scientific
    notation below 10^−digits or from 10^6 on), ∞ and −∞, "n/a" for None and NaN,
    "yes"/"no" for booleans, ``str`` for anything else."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value != 0 and (abs(value) < 10**-(digits) or abs(value) >= 10**6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table, every cell through :func:`fmt`; ends with a
    newline."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(fmt(v) for v in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"


def integral(value: Any) -> Any:
    """Integral floats below 10^15 as ints (1000.0 → 1000, which :func:`fmt` prints in full
    rather than as "1e+03"); anything else unchanged."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def delta_label(delta: float) -> str:
    """ "10^e" when ``delta`` (> 0) is a power of ten to 1e-12 relative, else ``f"{delta:g}"``."""
    exponent = round(math.log10(delta))
    return f"10^{exponent}" if math.isclose(delta, 10.0**exponent, rel_tol=1e-12) else f"{delta:g}"


def n_label(n: int) -> str:
    """ "10^e" when ``n`` is exactly a power of ten, else ``n`` with thousands separators."""
    exponent = round(math.log10(n)) if n > 0 else 0
    return f"10^{exponent}" if 10**exponent == n else f"{n:,}"


def span(values: Sequence[float]) -> str:
    """ "a–b" for the formatted minimum and maximum of ``values`` (non-empty), or "a" when
    both print the same.

    :raises ValueError: ``values`` is empty.
    """
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def shorten(reason: object, limit: int = 110) -> str:
    """A reason for a table cell: "|" replaced (it would end the cell), cut to ``limit``
    characters with "…"; "no reason given" for None or empty."""
    text = str(reason or "no reason given").replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"
