"""What cloaknet puts into Flower messages, and a model's arrays as one flat vector.

The contract between :class:`~cloaknet.flower.mod.CloaknetMod` (client) and
:class:`~cloaknet.flower.strategy.CloaknetFedAvg` (server):

* a **train instruction** carries the global model as its one ``ArrayRecord`` and, in its one
  ``ConfigRecord``, :data:`KEY_ROUND` (the round tag the submission belongs to) and
  :data:`KEY_PROTOCOL` (:func:`protocol_digest` of the parameters the server plans with);
* a **train reply** carries *no* ``ArrayRecord``: only a ``ConfigRecord`` under
  :data:`RECEIPT_RECORD` holding the transport's receipt (``round``, ``digest``,
  ``transport``), and optionally the ClientApp's own ``MetricRecord`` if the mod was told to
  forward it.

:class:`ArrayLayout` turns an ``ArrayRecord`` (keys in order, shapes, floating dtypes) into
one float64 vector of dimension d = Σ sizes and back; the order is the record's key order, each
array flattened in C order.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Final

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.protocols.vector import VectorSumProtocol

__all__ = [
    "KEY_PROTOCOL",
    "KEY_ROUND",
    "RECEIPT_RECORD",
    "ArrayLayout",
    "Receipt",
    "check_round_tag",
    "protocol_digest",
]

#: Key of the round tag in the train instruction's ConfigRecord.
KEY_ROUND: Final[str] = "cloaknet.round"
#: Key of :func:`protocol_digest` in the train instruction's ConfigRecord.
KEY_PROTOCOL: Final[str] = "cloaknet.protocol"
#: Key of the receipt ConfigRecord in a train reply.
RECEIPT_RECORD: Final[str] = "cloaknet"

_TAG: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_round_tag(tag: object) -> str:
    """``tag`` if it is a round tag: 1..64 characters of ``[A-Za-z0-9._-]``, starting with a
    letter or digit (safe as a file name).

    :raises ParameterError: anything else.
    """
    if not isinstance(tag, str) or _TAG.fullmatch(tag) is None:
        raise ParameterError(f"a round tag must match {_TAG.pattern}, got {tag!r}")
    return tag


def protocol_digest(protocol: VectorSumProtocol) -> str:
    """A short hex digest of the protocol's parameters (:meth:`VectorParams.to_json`,
    canonical JSON). Equal digests mean equal clipping, scale, noise, modulus and messages."""
    text = json.dumps(protocol.params.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Receipt:
    """Proof that a client's update entered a round: ``round`` (the shuffler's round tag or
    the chain's round id, as text), ``digest`` (hex: the shuffler's SHA-256 of the client's
    messages, or the entry mix's onion digest) and ``transport`` (its name)."""

    round: str
    digest: str
    transport: str

    def to_record(self) -> ConfigRecord:
        """The reply's ConfigRecord (:data:`RECEIPT_RECORD`)."""
        return ConfigRecord({"round": self.round, "digest": self.digest,
                             "transport": self.transport})

    @classmethod
    def from_record(cls, record: ConfigRecord) -> Receipt:
        """Inverse of :meth:`to_record`.

        :raises ParameterError: a field is missing or not a string.
        """
        values = []
        for key in ("round", "digest", "transport"):
            value = record.get(key)
            if not isinstance(value, str):
                raise ParameterError(f"a cloaknet receipt needs a text {key!r}, got {value!r}")
            values.append(value)
        return cls(*values)


@dataclass(frozen=True)
class ArrayLayout:
    """The keys, shapes and dtypes of a model's ``ArrayRecord`` (floating dtypes only)."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, record: ArrayRecord) -> ArrayLayout:
        """The layout of ``record``.

        :raises ParameterError: the record is empty or holds a non-floating array.
        """
        if not isinstance(record, ArrayRecord) or len(record) == 0:
            raise ParameterError("the model must be a non-empty ArrayRecord")
        keys, shapes, dtypes = [], [], []
        for key, array in record.items():
            values = array.numpy()
            if values.dtype.kind != "f":
                raise ParameterError(
                    f"array {key!r} has dtype {values.dtype}: cloaknet sums floating-point "
                    "parameters only"
                )
            keys.append(key)
            shapes.append(tuple(int(s) for s in values.shape))
            dtypes.append(values.dtype.str)
        return cls(tuple(keys), tuple(shapes), tuple(dtypes))

    @property
    def size(self) -> int:
        """d: the number of parameters."""
        return sum(int(np.prod(shape, dtype=np.int64)) for shape in self.shapes)

    def flatten(self, record: ArrayRecord) -> NDArray[np.float64]:
        """``record``'s arrays as one float64 vector (key order, C order).

        :raises ParameterError: ``record`` has another layout, or a value is not finite.
        """
        other = ArrayLayout.of(record)
        if other.keys != self.keys or other.shapes != self.shapes:
            raise ParameterError(
                f"the arrays {list(other.keys)} {list(other.shapes)} do not have the "
                f"model's layout {list(self.keys)} {list(self.shapes)}"
            )
        flat: NDArray[np.float64] = np.concatenate(
            [np.asarray(record[key].numpy(), dtype=np.float64).reshape(-1) for key in self.keys]
        )
        if not np.all(np.isfinite(flat)):
            raise ParameterError("the model's arrays hold a value that is not finite")
        return flat

    def unflatten(self, vector: NDArray[np.float64]) -> ArrayRecord:
        """The ArrayRecord with this layout holding ``vector`` (cast to each array's dtype).

        :raises ParameterError: ``vector`` is not one-dimensional of length :attr:`size`.
        """
        flat = np.asarray(vector, dtype=np.float64)
        if flat.ndim != 1 or flat.shape[0] != self.size:
            raise ParameterError(f"expected a vector of {self.size} values, got {flat.shape}")
        arrays: dict[str, Array] = {}
        start = 0
        for key, shape, dtype in zip(self.keys, self.shapes, self.dtypes, strict=True):
            count = int(np.prod(shape, dtype=np.int64))
            part = flat[start : start + count].reshape(shape).astype(np.dtype(dtype))
            arrays[key] = Array(np.ascontiguousarray(part))
            start += count
        return ArrayRecord(arrays)
