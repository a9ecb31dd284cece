"""Vector sums on a chain: :class:`VectorChainProtocol`, the
:class:`~cloaknet.protocols.base.SummationProtocol` face of a
:class:`~cloaknet.protocols.vector.VectorSumProtocol`.

Everything that carries a chain's protocol — :class:`~cloaknet.chainfile.CloakChain`, the
analyzer node (:func:`cloaknet.analysis.analyze_round`), the last mix's payload validator,
``cloaknet node`` and :func:`cloaknet.localchain.local_chain` — is written against
:class:`~cloaknet.protocols.base.SummationProtocol`: a fixed number of fixed-width messages
per user, an exact count check, ``result_fields`` for the round's JSON. A vector protocol
keeps all of those conventions (``cloaknet/protocols/vector.py``), so this adapter maps them
one to one and the chain carries vectors without a change to the mixnet or the analyzer:

* ``message_count`` = d·m, ``bytes_per_message`` = index bytes + share bytes (the payload
  is the coordinate index then the share, both big-endian);
* ``message_modulus`` = 256^bytes_per_message: every payload of the right width decodes to
  an integer below it (the generic decoder checks only the width); the finer checks — index
  below d, share below q — are made by :meth:`VectorChainProtocol.valid_payload` (the last
  mix's validator, so a bad payload is traced and its submission excluded) and again by the
  analyzer (a :class:`~cloaknet.errors.ShareError` makes the round's result an error, never
  a wrong sum);
* ``result_fields`` publishes ``vector`` (the d estimated coordinate sums, floats),
  ``dimension`` and ``estimate``, the total of the vector's coordinates (a float, so every
  round result keeps a scalar ``estimate``; for d = 1 it is the sum itself);
* ``epsilon``/``delta`` are the guarantee of the plan the parameters came from — for the
  **whole training** of ``plan.rounds`` rounds (``training_rounds`` in every result) — or
  NaN (no guarantee stated: explicit parameters, e.g. the noiseless configuration).

The scalar interface's inputs are x ∈ [0, 1]; here an input is one user's vector, checked by
:meth:`VectorChainProtocol.check_vector` (a 1-D sequence or array of d finite reals) and
clipped to L2 norm C by the local randomizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InputRangeError, ParameterError
from cloaknet.protocols.base import SummationProtocol
from cloaknet.protocols.fold import CoordinateFold, CoordinateSums, MessageFold
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = ["VectorChainProtocol"]

_U64_BYTES = 8
_REAL_KINDS = "fiu"


class VectorChainProtocol(SummationProtocol):
    """A :class:`~cloaknet.protocols.vector.VectorSumProtocol` (``vector``) run by a chain
    (module doc). Build it from the vector protocol, or with :meth:`from_params`.

    Invariants: one user sends :attr:`message_count` = d·m payloads of
    :attr:`bytes_per_message` bytes; ``users``, ``min_round_users`` and ``max_round_users``
    are the vector parameters' ``min_users`` and ``max_users``.

    :raises TypeError: ``vector`` is not a ``VectorSumProtocol``.
    """

    name = VectorSumProtocol.name

    def __init__(self, vector: VectorSumProtocol) -> None:
        if not isinstance(vector, VectorSumProtocol):
            raise TypeError(f"expected a VectorSumProtocol, not {type(vector).__name__}")
        self.vector = vector
        self.users = vector.users
        plan = vector.plan
        self.epsilon = math.nan if plan is None else plan.epsilon_achieved
        self.delta = math.nan if plan is None else plan.delta_achieved
        self._width = vector.bytes_per_message
        self._share_bits = 8 * vector.share_bytes

    @classmethod
    def from_params(cls, params: VectorParams) -> VectorChainProtocol:
        """The chain protocol for explicit parameters (no stated guarantee)."""
        return cls(VectorSumProtocol(params))

    # ------------------------------------------------------------------ wire format

    @property
    def params(self) -> VectorParams:
        """The vector protocol's parameters."""
        return self.vector.params

    @property
    def dimension(self) -> int:
        """d, the length of every user's vector."""
        return self.vector.dimension

    @property
    def messages_per_user(self) -> float:
        """d·m."""
        return float(self.vector.messages_per_user)

    @property
    def bits_per_message(self) -> int:
        """8 × :attr:`bytes_per_message` (the payload is byte-aligned: index, then share)."""
        return 8 * self._width

    @property
    def bytes_per_message(self) -> int:
        """Index bytes + share bytes."""
        return self._width

    @property
    def message_modulus(self) -> int:
        """256^bytes_per_message: any payload of the right width is below it (module doc)."""
        return 1 << (8 * self._width)

    @property
    def min_round_users(self) -> int:
        return self.vector.min_round_users

    @property
    def max_round_users(self) -> int:
        return self.vector.max_round_users

    def valid_payload(self, payload: bytes) -> bool:
        """True iff ``payload`` is one of this protocol's messages: exactly
        :attr:`bytes_per_message` bytes, index below d and share below q. Pure, thread-safe;
        the last mix's validator (:func:`cloaknet.validator.payload_validator`)."""
        if len(payload) != self._width:
            return False
        value = int.from_bytes(payload, "big")
        return (value >> self._share_bits) < self.dimension and (
            value & ((1 << self._share_bits) - 1)
        ) < self.vector.share_modulus

    def payloads(self, messages: NDArray[Any]) -> list[bytes]:
        """The fixed-width payloads of message integers (any shape, in C order): each
        message's big-endian bytes at :attr:`bytes_per_message` width.

        :raises ParameterError: a message is negative, not an integer, or does not fit the width.
        """
        flat = np.asarray(messages).reshape(-1)
        if flat.dtype.kind not in "iu":
            raise ParameterError(f"messages must be integers, got dtype {flat.dtype}")
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.message_modulus):
            raise ParameterError("a message does not fit the payload width")
        width = self._width
        raw = flat.astype(">u8").view(np.uint8).reshape(-1, _U64_BYTES)[:, _U64_BYTES - width :]
        data = raw.tobytes()
        return [data[i : i + width] for i in range(0, len(data), width)]

    # ------------------------------------------------------------------ local randomizer

    def check_vector(self, x: object) -> NDArray[np.float64]:
        """One user's input, validated: ``x`` as a float64 array of shape (d,).

        ``x`` must be a 1-D sequence (list, tuple, ...) of ints, floats, Fractions or numpy
        real scalars — not bools — or a 1-D numpy array of a real integer or float dtype,
        with exactly d finite entries. Its norm is not limited: the randomizer clips it to C.

        :raises InputRangeError: anything else (naming the first bad coordinate).
        """
        d = self.dimension
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in _REAL_KINDS:
                raise InputRangeError(
                    f"a vector must have a real dtype (float or int), got {x.dtype}"
                )
            if x.ndim != 1:
                raise InputRangeError(f"a vector must be 1-D, got an array of shape {x.shape}")
            items: Sequence[object] | NDArray[Any] = x
        elif isinstance(x, Sequence) and not isinstance(x, str | bytes | bytearray):
            for index, value in enumerate(x):
                if isinstance(value, bool) or not isinstance(
                    value, int | float | Fraction | np.integer | np.floating
                ):
                    raise InputRangeError(
                        f"coordinate {index} must be a real number, got {type(value).__name__}"
                    )
            items = x
        else:
            raise InputRangeError(
                f"this chain sums vectors of dimension {d}: expected a 1-D sequence or numpy "
                f"array of real numbers, got {type(x).__name__}"
            )
        if len(items) != d:
            raise InputRangeError(f"expected a vector of dimension {d}, got length {len(items)}")
        try:
            arr = np.asarray(items, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputRangeError(f"a vector must hold real numbers: {exc}") from None
        finite = np.isfinite(arr)
        if not finite.all():
            index = int(np.flatnonzero(~finite)[0])
            raise InputRangeError(f"coordinate {index} is not finite: {arr[index]!r}")
        return arr

    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """The local randomizer of every row of ``x`` (shape (n, d)): an (n, d·m) array of
        message integers (:meth:`VectorSumProtocol.encode_many`)."""
        return self.vector.encode_many(x, rng)

    def encode_value(
        self, x: object, rng: RandomSource = SYSTEM_RANDOM, *, clip: bool = False
    ) -> list[int]:
        """One user's d·m messages for the vector ``x`` (checked by :meth:`check_vector`;
        always clipped to L2 norm C — ``clip`` is for the scalar protocols' [0, 1] and has
        no effect here).

        :raises InputRangeError: as :meth:`check_vector`.
        """
        return self.vector.encode_vector(self.check_vector(x), rng)

    def encode_payloads(self, x: object, rng: RandomSource = SYSTEM_RANDOM) -> list[bytes]:
        """One user's d·m payloads for the vector ``x``, in coordinate order (what a client
        submits). Raises as :meth:`encode_value`."""
        return self.payloads(self.vector.encode_many(self.check_vector(x), rng))

    # ------------------------------------------------------------------ analyzer

    def analyze_vector(self, messages: NDArray[Any], users: int) -> NDArray[np.float64]:
        """The estimate of Σ_i clip(x_i), one float per coordinate (raises as
        :meth:`VectorSumProtocol.analyze_integers`)."""
        return self.vector.analyze(messages, users)

    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """The total of the estimated vector's coordinates (for d = 1, the sum itself)."""
        return float(np.sum(self.analyze_vector(messages, users)))

    def result_fields(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> dict[str, object]:
        """``vector`` (d floats), ``estimate`` (their total), ``dimension``
        (:meth:`VectorSumProtocol.result_fields`) and, when the parameters come from a plan,
        ``training_rounds`` (the rounds its (ε, δ) covers)."""
        return self._with_rounds(self.vector.result_fields(messages, users))

    def message_fold(self) -> MessageFold:
        """A :class:`~cloaknet.protocols.fold.CoordinateFold`: per coordinate, the count
        and the exact sum of the shares are all the analyzer needs."""
        return CoordinateFold(self.vector.coordinate_sums(), self._fields_from_sums)

    def _fields_from_sums(self, sums: CoordinateSums, users: int) -> dict[str, object]:
        return self._with_rounds(self.vector.fields_from_sums(sums, users))

    def _with_rounds(self, fields: dict[str, object]) -> dict[str, object]:
        if self.vector.plan is not None:
            fields["training_rounds"] = self.vector.plan.rounds
        return fields

    # ------------------------------------------------------------------ predictions

    def predicted_rmse(self) -> float:
        """RMSE of :meth:`analyze`'s total for n = ``users``: √d × the per-coordinate RMSE
        (:meth:`VectorSumProtocol.predicted_rmse`; coordinates' errors are independent but
        for the conditioning of the rounding, which that prediction ignores too)."""
        return math.sqrt(self.dimension) * self.vector.predicted_rmse()

    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """RMSE of the total for these inputs (rows of shape (n, d)): the root of the sum
        of the per-coordinate mean squared errors."""
        per_coordinate = self.vector.predicted_rmse_for(x)
        return float(np.sqrt(np.sum(per_coordinate**2)))

    def expected_estimate(self, x: NDArray[np.float64]) -> float:
        """Σ_i Σ_j clip(x_i)_j: what the total estimates."""
        return float(np.sum(self.vector.expected_estimate(x)))

    def parameters(self) -> dict[str, object]:
        """The vector protocol's parameters (``VectorSumProtocol.parameters``)."""
        return self.vector.parameters()

    def describe(self) -> dict[str, object]:
        """The common summary (:meth:`SummationProtocol.describe`) updated with the vector
        protocol's (``VectorSumProtocol.describe``: dimension, messages per coordinate, ...;
        its fields win, so ``predicted_rmse`` is per coordinate)."""
        info = super().describe()
        info.update(self.vector.describe())
        return info

    def __repr__(self) -> str:
        return f"VectorChainProtocol({self.vector!r})"
