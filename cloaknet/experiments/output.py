"""The file edge of the experiments: typed rows become dicts only here, for CSV and JSON;
plots use a non-interactive matplotlib."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "columns_of",
    "pyplot",
    "row_dict",
    "write_csv",
    "write_json",
    "write_rows",
]


def pyplot() -> Any:
    """matplotlib.pyplot with the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def columns_of(row_type: type[DataclassInstance]) -> tuple[str, ...]:
    """The field names of a row dataclass, in declaration order (the CSV columns)."""
    return tuple(field.name for field in dataclasses.fields(row_type))


def row_dict(row: DataclassInstance) -> dict[str, Any]:
    """One row as a JSON/CSV-ready dict, keys in field order (values are not converted:
    rows hold only str, int, float, bool and None)."""
    return {field.name: getattr(row, field.name) for field in dataclasses.fields(row)}


def write_csv(
    path: Path,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
) -> None:
    """Write ``rows`` to ``path`` with a header of ``columns`` (a missing key is an empty
    cell, an extra key is ignored). Floats are written with ``str`` (shortest round-trip
    form, ``inf``/``nan`` as such), booleans as ``True``/``False``, None as empty."""
    cols = list(columns)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c) for c in cols})


def write_rows(
    path: Path, row_type: type[DataclassInstance], rows: Sequence[DataclassInstance]
) -> None:
    """Write rows of dataclass ``row_type`` to ``path``: one column per field, in declaration
    order, with a header even when there are no rows.

    :raises TypeError: a row is not an instance of ``row_type``.
    """
    for row in rows:
        if not isinstance(row, row_type):
            raise TypeError(f"expected {row_type.__name__} rows, got {type(row).__name__}")
    write_csv(path, [row_dict(row) for row in rows], columns_of(row_type))


def write_json(path: Path, value: Any) -> None:
    """``value`` as indented JSON (2 spaces) followed by a newline."""
    path.write_text(json.dumps(value, indent=2) + "\n")
