"""Vector sums in the shuffled model: clipping, conditional rounding, distributed Skellam noise
and split-and-mix per coordinate.

Each user holds a vector x ∈ R^d (a model update). The local randomizer

1. clips x to L2 norm at most C (x·min(1, C/‖x‖₂));
2. scales by s and rounds every coordinate randomly and unbiasedly to an integer
   (⌊y⌋ + Bernoulli(y − ⌊y⌋)), *conditionally*: the rounding is redrawn until
   ‖x̃‖₂² <= B², an exact integer test (Kairouz, Liu, Steinke, "The Distributed Discrete
   Gaussian Mechanism for Federated Learning with Secure Aggregation", arXiv 2102.06387;
   Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private Federated
   Learning", arXiv 2110.04995). B² comes from :func:`rounding_norm_bound_sq`, a Hoeffding
   bound under which one rounding fails the test with probability at most β;
3. adds to every coordinate an independent exact Skellam draw of variance μ/n_h
   (:mod:`cloaknet.skellam`; the n_h honest users' draws sum to exactly Skellam(μ));
4. splits every coordinate's value mod q into m uniformly random shares (Ishai, Kushilevitz,
   Ostrovsky, Sahai, FOCS 2006) and sends d·m messages. A message carries its coordinate's
   index inside the payload: ``index`` then ``share``, each a fixed-width big-endian
   unsigned integer (:attr:`VectorSumProtocol.index_bytes` and ``share_bytes`` bytes). As an
   integer the message is ``index · 256^share_bytes + share``, whose big-endian bytes at the
   full width are exactly that payload.

The analyzer splits the shuffled messages by index into d multisets of n·m shares each, sums
each mod q, reads each sum in the window [−W, W] (q = 2W + 1) and divides by s: an estimate of
Σ_i clip(x_i). Only the per-coordinate multisets are used.

Why this interface is a sibling of :class:`~cloaknet.protocols.base.SummationProtocol` rather
than an implementation of it: the scalar interface fixes inputs to x ∈ [0, 1], estimates to a
float and messages to integers below one modulus, and :func:`cloaknet.analysis.analyze_round`
and the planner rely on that. Vectors have d-dimensional inputs and estimates, and messages
carry an index next to the share. :class:`VectorSumProtocol` keeps every convention that
does not depend on the scalar shape — a fixed number of fixed-width messages per user
(:attr:`~VectorSumProtocol.messages_per_user`, :attr:`~VectorSumProtocol.bytes_per_message`),
an exact count check, an analyzer that uses the multiset of messages only, ``result_fields``
for a round's JSON result, ``describe`` — so the mixnet (fixed-size opaque payloads) and an
analyzer node can carry it without change to either.

The privacy argument (why the view decomposes per coordinate, why the split-and-mix distance
is d times the scalar one, what the central-equivalent mechanism is) is in
``docs/protocols.md`` ("Vector sums"); the accounting over training rounds is in
:mod:`cloaknet.fl_accounting` and ``docs/accounting.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import ParameterError, ShareCountError, ShareError
from cloaknet.protocols.fold import CoordinateSums
from cloaknet.protocols.vector_rounding import (
    as_rows,
    clip_vectors,
    conditional_round,
    positive_float,
    rounding_norm_bound_sq,
)
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.skellam import SkellamNoise
from cloaknet.validation import check_int
from cloaknet.vectorized import encode_many

if TYPE_CHECKING:
    from cloaknet.fl_accounting import FLPlan

__all__ = [
    "VectorParams",
    "VectorSumProtocol",
]

#: Largest s·C: keeps every rounded coordinate and every squared norm exact in int64.
MAX_SCALED_CLIP: Final[float] = float(1 << 26)
#: Largest dimension (the squared norms of rounded vectors stay below 2^62).
MAX_DIMENSION: Final[int] = 1 << 24


def _width(largest: int) -> int:
    """Bytes of a fixed-width big-endian unsigned integer holding 0..largest."""
    return max(1, (largest.bit_length() + 7) // 8)


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class VectorParams:
    """The wire and mechanism parameters of :class:`VectorSumProtocol` (no accounting).

    ``dimension`` d, ``clip`` C, ``scale`` s, ``norm_bound_sq`` B² (the conditional rounding
    bound; at least :func:`rounding_norm_bound_sq` at β = 1/2, so every rounding attempt
    passes with probability >= 1/2), ``noise_variance`` the Skellam variance each user adds
    to each coordinate (an exact rational; 0 = no noise), ``messages`` m shares per
    coordinate, ``modulus`` q and ``window`` W: the analyzer decodes each coordinate's sum
    into [−W, W]; q >= 2W + 1 and W >= ``max_users``·⌊B⌋, so sums never wrap without noise.
    ``min_users``/``max_users``: the round sizes the parameters are planned for.
    """

    dimension: int
    clip: float
    scale: float
    norm_bound_sq: int
    noise_variance: Fraction
    messages: int
    modulus: int
    window: int
    min_users: int
    max_users: int

    def __post_init__(self) -> None:
        d = check_int("dimension", self.dimension, 1)
        if d > MAX_DIMENSION:
            raise ParameterError(f"dimension must be at most {MAX_DIMENSION}, got {d}")
        c = positive_float("clip", self.clip)
        s = positive_float("scale", self.scale)
        if s * c > MAX_SCALED_CLIP:
            raise ParameterError(f"scale·clip must be at most 2^26, got {s * c}")
        bound = check_int("norm_bound_sq", self.norm_bound_sq, 0)
        least = rounding_norm_bound_sq(s * c, d, 0.5)
        if bound < least:
            raise ParameterError(
                f"norm_bound_sq = {bound} is below {least}, the bound rounding meets with "
                "probability 1/2 (conditional rounding could loop)"
            )
        noise = self.noise_variance
        if isinstance(noise, bool) or not isinstance(noise, Fraction | int) or noise < 0:
            raise ParameterError(
                f"noise_variance must be an exact rational >= 0, got {noise!r}"
            )
        m = check_int("messages", self.messages, 1)
        q = check_int("modulus", self.modulus, 2)
        w = check_int("window", self.window, 0)
        lo = check_int("min_users", self.min_users, 1)
        hi = check_int("max_users", self.max_users, lo)
        signal = hi * math.isqrt(bound)
        if w < signal:
            raise ParameterError(
                f"window W = {w} is below max_users·⌊B⌋ = {signal}: sums could wrap"
            )
        if q < 2 * w + 1:
            raise ParameterError(f"modulus q = {q} must be at least 2W + 1 = {2 * w + 1}")
        if _width(d - 1) + _width(q - 1) > 8:
            raise ParameterError(
                "a message (index bytes + share bytes) must fit in 8 bytes; "
                f"d = {d} and q = {q} need {_width(d - 1) + _width(q - 1)}"
            )
        for name, value in (
            ("dimension", d), ("clip", c), ("scale", s), ("norm_bound_sq", bound),
            ("noise_variance", Fraction(noise)), ("messages", m), ("modulus", q),
            ("window", w), ("min_users", lo), ("max_users", hi),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def noiseless(
        cls,
        dimension: int,
        clip: float,
        scale: float,
        *,
        users: int,
        messages: int = 3,
        beta: float = 2.0**-20,
    ) -> VectorParams:
        """Parameters without noise (exact sums of the rounded vectors; no privacy from
        noise): B² from :func:`rounding_norm_bound_sq` at β, W = users·⌊B⌋, q = 2W + 1."""
        bound = rounding_norm_bound_sq(float(scale) * float(clip), dimension, beta)
        window = users * math.isqrt(bound)
        return cls(
            dimension=dimension, clip=clip, scale=scale, norm_bound_sq=bound,
            noise_variance=Fraction(0), messages=messages, modulus=2 * window + 1,
            window=window, min_users=users, max_users=users,
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["noise_variance"] = _fraction_text(self.noise_variance)
        return out


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else (
        f"{value.numerator}/{value.denominator}"
    )


# --------------------------------------------------------------------------- protocol


class VectorSumProtocol:
    """Vector summation in the shuffled model (module doc): ``encode_many`` /
    ``encode_vector`` are the local randomizer, ``analyze`` the analyzer.

    Build it from :class:`VectorParams` (``plan`` optional: the
    :class:`~cloaknet.fl_accounting.FLPlan` whose guarantee it carries) or with
    :meth:`planned`.
    """

    name = "vector-skellam"

    def __init__(self, params: VectorParams, *, plan: FLPlan | None = None) -> None:
        if not isinstance(params, VectorParams):
            raise TypeError(f"expected VectorParams, not {type(params).__name__}")
        self.params = params
        self.plan = plan
        self._noise = SkellamNoise(params.noise_variance)
        self._share_bytes = _width(params.modulus - 1)
        self._index_bytes = _width(params.dimension - 1)
        self._shift = np.uint64(8 * self._share_bytes)
        self._share_mask = np.uint64((1 << (8 * self._share_bytes)) - 1)

    @classmethod
    def planned(
        cls,
        dimension: int,
        clip: float,
        rounds: int,
        epsilon: float,
        delta: float,
        users: int,
        **options: Any,
    ) -> VectorSumProtocol:
        """The protocol with the parameters :func:`cloaknet.fl_accounting.plan_fl` chooses
        for these arguments (``options`` are passed on)."""
        from cloaknet.fl_accounting import plan_fl

        made = plan_fl(dimension, clip, rounds, epsilon, delta, users, **options)
        return cls(made.params(), plan=made)

    # ------------------------------------------------------------------ wire format

    @property
    def dimension(self) -> int:
        return self.params.dimension

    @property
    def users(self) -> int:
        """The smallest round the parameters are planned for (privacy, error prediction)."""
        return self.params.min_users

    @property
    def min_round_users(self) -> int:
        return self.params.min_users

    @property
    def max_round_users(self) -> int:
        return self.params.max_users

    @property
    def messages_per_coordinate(self) -> int:
        """m: shares sent for every coordinate."""
        return self.params.messages

    @property
    def messages_per_user(self) -> int:
        """d·m: messages every user sends."""
        return self.params.dimension * self.params.messages

    @property
    def share_modulus(self) -> int:
        """q: every share is an integer in [0, q)."""
        return self.params.modulus

    @property
    def index_bytes(self) -> int:
        """Width of the coordinate index at the start of a payload."""
        return self._index_bytes

    @property
    def share_bytes(self) -> int:
        """Width of the share after the index."""
        return self._share_bytes

    @property
    def bytes_per_message(self) -> int:
        """Fixed payload width: index bytes + share bytes."""
        return self._index_bytes + self._share_bytes

    @property
    def bytes_per_user(self) -> int:
        """d·m·(index bytes + share bytes)."""
        return self.messages_per_user * self.bytes_per_message

    def join_message(self, index: int, share: int) -> int:
        """The message carrying ``share`` of coordinate ``index`` as an integer
        (index·256^share_bytes + share).

        :raises ShareError: index not in [0, d) or share not in [0, q).
        """
        if not 0 <= index < self.dimension:
            raise ShareError(f"index {index} is not in [0, {self.dimension})")
        if not 0 <= share < self.share_modulus:
            raise ShareError(f"share {share} is not in [0, {self.share_modulus})")
        return (index << (8 * self._share_bytes)) | share

    def split_message(self, message: int) -> tuple[int, int]:
        """(index, share) of a message integer, both checked.

        :raises ShareError: not an int, negative, or index / share out of range.
        """
        if isinstance(message, bool) or not isinstance(message, int | np.integer):
            raise ShareError(f"a message must be an integer, got {message!r}")
        value = int(message)
        if value < 0:
            raise ShareError(f"a message must be >= 0, got {value}")
        index, share = value >> (8 * self._share_bytes), value & int(self._share_mask)
        self.join_message(index, share)  # range checks
        return index, share

    def message_to_bytes(self, message: int) -> bytes:
        """The fixed-width payload: index (``index_bytes``, big-endian) then share
        (``share_bytes``, big-endian)."""
        index, share = self.split_message(message)
        return index.to_bytes(self._index_bytes, "big") + share.to_bytes(
            self._share_bytes, "big"
        )

    def message_from_bytes(self, payload: bytes | bytearray | memoryview) -> int:
        """Inverse of :meth:`message_to_bytes`.

        :raises ShareError: wrong length, or index / share out of range.
        """
        data = bytes(payload)
        if len(data) != self.bytes_per_message:
            raise ShareError(
                f"a payload must be {self.bytes_per_message} bytes, got {len(data)}"
            )
        index = int.from_bytes(data[: self._index_bytes], "big")
        share = int.from_bytes(data[self._index_bytes :], "big")
        return self.join_message(index, share)

    def decode_payloads(self, payloads: Sequence[bytes]) -> NDArray[np.uint64]:
        """Message integers of a sequence of payloads (for :meth:`analyze`)."""
        return np.array([self.message_from_bytes(p) for p in payloads], dtype=np.uint64)

    # ------------------------------------------------------------------ local randomizer

    def clip_vectors(self, x: object) -> NDArray[np.float64]:
        """The rows of ``x`` (n × d, or one vector) clipped to L2 norm C.

        :raises InputRangeError: wrong shape or a non-finite coordinate.
        """
        return clip_vectors(as_rows(x, self.dimension), self.params.clip)

    def quantize(self, x: object, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """Clip, scale by s and round conditionally: an (n, d) int64 array, every row of
        squared norm at most B²."""
        clipped = self.clip_vectors(x)
        return conditional_round(clipped * self.params.scale, self.params.norm_bound_sq, rng)

    def noise(self, users: int, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.int64]:
        """Every user's noise: an (n, d) array of independent exact Skellam draws of the
        per-user variance (zeros without noise)."""
        return self._noise.sample_vectors(users, self.dimension, rng)

    def encode_values(
        self, values: NDArray[np.int64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[np.uint64]:
        """Split-and-mix integer rows (n, d) into an (n, d·m) array of message integers:
        row i holds, for each coordinate j in order, m messages with index j whose shares
        sum to values[i, j] mod q."""
        rows = np.asarray(values)
        if rows.ndim != 2 or rows.shape[1] != self.dimension or rows.dtype.kind not in "iu":
            raise ParameterError(
                f"values must be an integer array of shape (n, {self.dimension})"
            )
        n, d, m = rows.shape[0], self.dimension, self.messages_per_coordinate
        shares = np.asarray(
            encode_many(rows.reshape(-1).astype(np.int64), m, self.share_modulus, rng),
            dtype=np.uint64,
        ).reshape(n, d, m)
        index = np.arange(d, dtype=np.uint64).reshape(1, d, 1) << self._shift
        messages: NDArray[np.uint64] = (shares | index).reshape(n, d * m)
        return messages

    def encode_many(self, x: object, rng: RandomSource = SYSTEM_RANDOM) -> NDArray[np.uint64]:
        """The local randomizer of every row of ``x``: an (n, d·m) array of messages."""
        quantized = self.quantize(x, rng)
        values = quantized + self.noise(quantized.shape[0], rng)
        return self.encode_values(values, rng)

    def encode_vector(self, x: object, rng: RandomSource = SYSTEM_RANDOM) -> list[int]:
        """One user's d·m messages (Python ints) for the vector ``x``."""
        return [int(v) for v in self.encode_many(as_rows(x, self.dimension), rng)[0].tolist()]

    def encode_payloads(self, x: object, rng: RandomSource = SYSTEM_RANDOM) -> list[bytes]:
        """One user's d·m fixed-width payloads (index then share) for the vector ``x``."""
        return [self.message_to_bytes(v) for v in self.encode_vector(x, rng)]

    # ------------------------------------------------------------------ analyzer

    def analyze_integers(self, messages: object, users: int) -> list[int]:
        """The d decoded integer sums Σ_i (x̃_ij + Z_ij), each read in [−W, W].

        The messages may come in any shape and order. Checks: integer dtype, every message's
        index in [0, d) and share in [0, q), exactly ``users``·m messages per coordinate
        (hence ``users``·d·m in all).

        :raises ParameterError: bad ``users`` (not >= 1 or above ``max_users``) or dtype.
        :raises ShareCountError: a wrong total or per-coordinate count.
        :raises ShareError: a message out of range.
        """
        n = self._check_round_users(users)
        arr = np.asarray(messages)
        if arr.dtype.kind not in "ui":
            raise ParameterError(f"messages must be integers, got dtype {arr.dtype}")
        flat = arr.reshape(-1)
        self._check_total(n, int(flat.shape[0]))
        if arr.dtype.kind == "i" and flat.shape[0] and int(flat.min()) < 0:
            raise ShareError("messages must be non-negative")
        sums = self.coordinate_sums()
        sums.add(flat.astype(np.uint64, copy=False))
        return self.integers_from_sums(sums, n)

    def coordinate_sums(self) -> CoordinateSums:
        """Empty per-coordinate sums of this protocol's messages (index, share), to fold
        messages into a block at a time and decode with :meth:`integers_from_sums`."""
        return CoordinateSums(self.dimension, self._shift, self._share_mask)

    def integers_from_sums(self, sums: CoordinateSums, users: int) -> list[int]:
        """:meth:`analyze_integers` of the messages folded into ``sums`` (same checks, in
        the same order, and the same errors)."""
        n = self._check_round_users(users)
        d, m = self.dimension, self.messages_per_coordinate
        self._check_total(n, sums.count)
        if sums.count:
            if sums.max_index >= d:
                raise ShareError(f"a message has index {sums.max_index} >= d = {d}")
            if sums.max_share >= self.share_modulus:
                raise ShareError(f"a message has a share >= q = {self.share_modulus}")
        counts = sums.counts
        if np.any(counts != n * m):
            j = int(np.flatnonzero(counts != n * m)[0])
            raise ShareCountError(
                f"coordinate {j} has {int(counts[j])} messages, expected n·m = {n * m}"
            )
        q, w = self.share_modulus, self.params.window
        out: list[int] = []
        for lo, hi in zip(sums.low.tolist(), sums.high.tolist(), strict=True):
            total = ((int(hi) << 32) + int(lo)) % q
            out.append(total - q if total > w else total)
        return out

    def _check_round_users(self, users: int) -> int:
        n = check_int("users", users, 1)
        if n > self.params.max_users:
            raise ParameterError(
                f"round has {n} users but the window was planned for {self.params.max_users}"
            )
        return n

    def _check_total(self, users: int, count: int) -> None:
        d, m = self.dimension, self.messages_per_coordinate
        expected = users * d * m
        if count != expected:
            raise ShareCountError(
                f"expected n·d·m = {users}·{d}·{m} = {expected} messages, got {count}"
            )

    def analyze(self, messages: object, users: int) -> NDArray[np.float64]:
        """The estimate of Σ_i clip(x_i): the decoded integer sums divided by s."""
        return self._estimate(self.analyze_integers(messages, users))

    def _estimate(self, sums: list[int]) -> NDArray[np.float64]:
        estimate: NDArray[np.float64] = np.array(
            [float(Fraction(v) / Fraction(self.params.scale)) for v in sums], dtype=np.float64
        )
        return estimate

    def result_fields(self, messages: object, users: int) -> dict[str, object]:
        """A round's JSON-ready result: ``vector`` (the d estimated coordinate sums, floats),
        ``estimate`` (their total), ``dimension`` and ``users`` — what a chain's analyzer
        publishes (:mod:`cloaknet.protocols.vector_chain`). Raises what :meth:`analyze`
        raises."""
        return self._fields(self.analyze(messages, users), users)

    def fields_from_sums(self, sums: CoordinateSums, users: int) -> dict[str, object]:
        """:meth:`result_fields` of the messages folded into ``sums`` (raises what
        :meth:`integers_from_sums` raises)."""
        return self._fields(self._estimate(self.integers_from_sums(sums, users)), users)

    def _fields(self, vector: NDArray[np.float64], users: int) -> dict[str, object]:
        return {
            "vector": [float(v) for v in vector.tolist()],
            "estimate": float(np.sum(vector)),
            "dimension": self.dimension,
            "users": users,
        }

    # ------------------------------------------------------------------ predictions

    def expected_estimate(self, x: object) -> NDArray[np.float64]:
        """Σ_i clip(x_i): what the analyzer estimates (unbiased up to the conditional
        rounding's β-small shift and wrap-around; ``docs/protocols.md``)."""
        total: NDArray[np.float64] = self.clip_vectors(x).sum(axis=0)
        return total

    def predicted_rmse(self, users: int | None = None) -> float:
        """Per-coordinate RMSE of the estimate for a round of ``users`` (default
        ``self.users``) users, an upper bound for every input:
        sqrt(n/4 + n·v)/s with v the per-user noise variance (rounding variance f(1 − f)
        <= 1/4 per user and coordinate)."""
        n = self.users if users is None else check_int("users", users, 1)
        variance = n / 4.0 + n * float(self.params.noise_variance)
        return math.sqrt(variance) / self.params.scale

    def predicted_rmse_for(self, x: object) -> NDArray[np.float64]:
        """Per-coordinate RMSE for these inputs: sqrt(Σ_i f_ij(1 − f_ij) + n·v)/s, with f the
        fractional parts of the scaled clipped inputs (conditioning ignored)."""
        y = self.clip_vectors(x) * self.params.scale
        frac = y - np.floor(y)
        rounding = np.sum(frac * (1.0 - frac), axis=0)
        n = y.shape[0]
        rmse: NDArray[np.float64] = (
            np.sqrt(rounding + n * float(self.params.noise_variance)) / self.params.scale
        )
        return rmse

    def parameters(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.params.to_json())
        out.update(
            {
                "index_bytes": self.index_bytes,
                "share_bytes": self.share_bytes,
                "noise": "skellam" if self.params.noise_variance else "none",
            }
        )
        if self.plan is not None:
            out["plan"] = self.plan.to_json()
        return out

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary: the wire format, the predicted error and the parameters."""
        info: dict[str, object] = {
            "protocol": self.name,
            "dimension": self.dimension,
            "users": self.users,
            "messages_per_coordinate": self.messages_per_coordinate,
            "messages_per_user": self.messages_per_user,
            "bytes_per_message": self.bytes_per_message,
            "bytes_per_user": self.bytes_per_user,
            "share_modulus": self.share_modulus,
            "predicted_rmse": self.predicted_rmse(),
        }
        if self.plan is not None:
            info["epsilon"] = self.plan.epsilon_achieved
            info["delta"] = self.plan.delta_achieved
            info["rounds"] = self.plan.rounds
        info.update(self.parameters())
        return info

    def __repr__(self) -> str:
        return (
            f"VectorSumProtocol(d={self.dimension}, users={self.users}, "
            f"m={self.messages_per_coordinate}, q={self.share_modulus})"
        )
