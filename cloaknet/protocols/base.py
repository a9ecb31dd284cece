"""The common interface of the summation protocols: the cloak and the ones it is compared with.

Every protocol is a pair (local randomizer, analyzer) in the shuffled model: each of the n
users turns a value x_i in [0, 1] into a fixed number m of messages, the shuffler hands the
analyzer the multiset of all n·m messages, and the analyzer returns an estimate of Σ x_i.
:class:`SummationProtocol` fixes that contract, so that the planner, the experiments, the
client library and the analyzer node treat the invisibility cloak (arXiv 1906.08320) and the
protocols of its Figure 1 — and two more references — alike (``docs/protocols.md``).

Conventions shared by all implementations
------------------------------------------
* Messages are integers in ``[0, message_modulus)`` sent with a fixed width of
  ``ceil(bits_per_message / 8)`` bytes; ``bytes_per_user = messages_per_user · that width``.
* ``encode_many(x, rng)`` returns an ``(n, m)`` integer array, one row per user;
  ``encode_value(x, rng)`` the m messages of one user. ``m`` is fixed per instance.
* ``analyze(messages, users)`` takes the messages in any shape and order (it only uses their
  multiset, in fact only their sum) and returns the estimate as a float;
  ``result_fields(messages, users)`` the JSON fields of a round's result.
* ``predicted_rmse()`` is an analytic prediction for ``n = self.users`` that holds for every
  input (an upper bound), except for the cloak, which reports the planner's model
  (:mod:`cloaknet.planner`); ``predicted_rmse_for(x)`` is the exact RMSE for given inputs where
  the protocol allows it; ``expected_estimate(x)`` is the analyzer's mean for given inputs
  (Σ x_i for the unbiased protocols).
* All randomness comes from a :class:`~cloaknet.randomness.RandomSource` (default: the OS
  CSPRNG); uniform integers are made from ``rng.token_bytes`` by
  :func:`cloaknet.vectorized.uniform_residues` (rejection, no modulo bias).
"""

from __future__ import annotations

import abc
import math
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.encoding import check_input
from cloaknet.errors import ParameterError, ShareCountError, ShareError
from cloaknet.protocols.fold import MessageFold
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.validation import check_int
from cloaknet.vectorized import quantize, uniform_residues

__all__ = [
    "SummationProtocol",
    "check_epsilon_delta",
    "check_int",
    "check_message_count",
    "flat_messages",
    "randomized_round",
    "round_up_decisions",
    "uniform_bits",
]

#: Resolution of the uniform draws used for Bernoulli decisions with float probabilities.
UNIFORM_BITS: Final[int] = 53
_TWO53: Final[float] = float(1 << UNIFORM_BITS)
# Dekker/Veltkamp splitting constant for binary64: 2**27 + 1.
_SPLIT: Final[float] = 134217729.0
_MAX_PRECISION: Final[int] = 1 << 53


# --------------------------------------------------------------------------- validation


def check_epsilon_delta(users: object, epsilon: object, delta: object) -> tuple[int, float, float]:
    """Validate (n, ε, δ): n >= 1 integer, ε finite > 0, δ in (0, 1). ParameterError otherwise."""
    n = check_int("users", users, 1)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.floating):
        raise ParameterError(f"epsilon must be a number, got {epsilon!r}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, int | float | np.floating):
        raise ParameterError(f"delta must be a number, got {delta!r}")
    dlt = float(delta)
    if not 0.0 < dlt < 1.0:
        raise ParameterError(f"delta must lie in (0, 1), got {delta!r}")
    return n, eps, dlt


def flat_messages(messages: NDArray[Any], users: int, per_user: int, modulus: int) -> NDArray[Any]:
    """Flatten ``messages`` and check the count (``users · per_user``) and the range.

    :raises ParameterError: ``users`` is not a positive integer or the dtype is not integral.
    :raises ShareCountError: the number of messages is not ``users · per_user``.
    :raises ShareError: a message lies outside ``[0, modulus)``.
    """
    n = check_int("users", users, 1)
    arr = np.asarray(messages)
    if arr.dtype.kind not in "uiO":
        raise ParameterError(f"messages must be integers, got dtype {arr.dtype}")
    flat = arr.reshape(-1)
    check_message_count(n, int(flat.shape[0]), per_user)
    if flat.shape[0]:
        if arr.dtype.kind == "O":
            values = flat.tolist()
            if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                raise ShareError("messages must be Python ints")
            low, high = min(values), max(values)
        else:
            low, high = int(flat.min()), int(flat.max())
        if low < 0 or high >= modulus:
            raise ShareError(f"messages must lie in [0, {modulus}), found range [{low}, {high}]")
    return flat


def check_message_count(users: object, count: int, per_user: int) -> int:
    """``users`` as an int, checked as :func:`flat_messages` checks it against ``count``
    messages (what a :class:`~cloaknet.protocols.fold.SumFold` sees instead of the array).

    :raises ParameterError: ``users`` is not a positive integer.
    :raises ShareCountError: ``count`` is not ``users · per_user``.
    """
    n = check_int("users", users, 1)
    expected = n * per_user
    if count != expected:
        raise ShareCountError(f"expected n·m = {n}·{per_user} = {expected} messages, got {count}")
    return n


# --------------------------------------------------------------------------- randomness


def uniform_bits(count: int, bits: int, rng: RandomSource) -> NDArray[np.uint64]:
    """``count`` independent uniform integers in ``[0, 2**bits)`` (``1 <= bits <= 62``), from
    ``rng.token_bytes`` via :func:`cloaknet.vectorized.uniform_residues` (a power-of-two
    modulus needs no rejection: exactly ``ceil(bits/8)`` bytes per value)."""
    drawn = uniform_residues(1 << bits, (count,), rng)
    return np.asarray(drawn, dtype=np.uint64)


def _split(a: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Veltkamp split: hi + lo == a, each with at most 26 significant bits."""
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def _product_error(
    x: NDArray[np.float64], k: float, p: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Dekker's TwoProduct error term: ``x·k − p`` exactly, for ``p = fl(x·k)`` (round to
    nearest binary64, no overflow; exact unless partial products underflow, i.e. for x below
    about 2**-960, where the decision below does not depend on it — see
    :func:`round_up_decisions`)."""
    x_hi, x_lo = _split(x)
    k_hi, k_lo = _split(np.array(k))
    err: NDArray[np.float64] = ((x_hi * k_hi - p) + x_hi * k_lo + x_lo * k_hi) + x_lo * k_lo
    return err


def round_up_decisions(
    x: NDArray[np.float64], precision: int, floor: NDArray[np.int64], u: NDArray[np.uint64]
) -> NDArray[np.bool_]:
    """Decide ``u < ρ · 2**53`` exactly, where ρ = x·k − floor(x·k) is the exact fractional
    part of the real product of the binary64 value x and k, and u is an integer in
    ``[0, 2**53)``.

    With u uniform this is a Bernoulli trial with probability ``⌈ρ·2**53⌉ / 2**53``, which
    differs from ρ by less than 2**-53 (the only inexactness of the randomized rounding; the
    comparison itself is exact). ``floor`` must be :func:`cloaknet.vectorized.quantize`'s exact
    ``floor(x·k)``.

    Method: x·k = p + e exactly (p = fl(x·k), e from Dekker's TwoProduct) and
    ρ = a + e with a = p − floor exact in [0, 1]. Scaling by 2**53 is exact: A = a·2**53,
    E = e·2**53, and the test is ``u < A + E``.

    * If A is an integer (always the case when p >= 1, because then a is a multiple of
      ulp(p) >= 2**-52), ``t = u − A`` is an exact integer and the test is ``t < E``.
    * Otherwise p < 1/2, floor = 0 and |E| <= 2**53·ulp(p)/2 <= 1/4. With A = Af + f
      (Af integer, 0 < f < 1, both exact) and t = u − Af: t <= −1 → true; t >= 2 → false;
      t = 0 → ``f > −E``; t = 1 → ``f + E > 1``, impossible unless f >= 1/2, where
      ``1 − f`` is exact (Sterbenz) and the test is ``1 − f < E``.
    """
    k = float(precision)
    p = x * k
    e = _product_error(x, k, p)
    a = p - floor.astype(np.float64)
    big_a = a * _TWO53
    big_e = e * _TWO53
    af = np.floor(big_a)
    frac = big_a - af
    t = u.astype(np.float64) - af  # exact: both are integers below 2**54
    integral = frac == 0.0
    result = np.where(integral, t < big_e, False)
    frac_case = ~integral
    if frac_case.any():
        res_f = np.zeros_like(result)
        res_f |= t <= -1.0
        res_f |= (t == 0.0) & (frac > -big_e)
        res_f |= (t == 1.0) & (frac >= 0.5) & ((1.0 - frac) < big_e)
        result = np.where(frac_case, res_f, result)
    out: NDArray[np.bool_] = np.asarray(result, dtype=np.bool_)
    return out


def randomized_round(
    x: NDArray[np.float64], precision: int, rng: RandomSource = SYSTEM_RANDOM
) -> NDArray[np.int64]:
    """Randomized rounding of x·k to the grid {0..k}: floor(x·k) + Bernoulli(frac(x·k)).

    Contract: ``x`` is array-like with values in [0, 1] (else
    :class:`~cloaknet.errors.InputRangeError`, via :func:`cloaknet.vectorized.quantize`);
    ``1 <= precision < 2**53``. Returns int64 of the same shape with values in [0, k] and
    E[result] = x·k up to less than 2**-53 per entry (see :func:`round_up_decisions`: one
    53-bit uniform integer per entry, compared exactly with the scaled fractional part).
    Consumes 7 bytes of ``rng`` per entry.
    """
    k = check_int("precision", precision, 1)
    if k >= _MAX_PRECISION:
        raise ParameterError(f"precision must be < 2**53, got {k}")
    xs = np.asarray(x, dtype=np.float64)
    floor = quantize(xs, k)
    flat_x = xs.reshape(-1)
    flat_floor = floor.reshape(-1)
    u = uniform_bits(flat_x.shape[0], UNIFORM_BITS, rng)
    up = round_up_decisions(flat_x, k, flat_floor, u)
    rounded: NDArray[np.int64] = (flat_floor + up.astype(np.int64)).reshape(xs.shape)
    return rounded


# --------------------------------------------------------------------------- interface


class SummationProtocol(abc.ABC):
    """One real-summation protocol in the shuffled model, for a fixed (n, ε, δ).

    Subclasses set ``name`` and implement the abstract members. Contracts:

    * ``messages_per_user`` (m), ``bits_per_message`` and ``message_modulus`` describe the
      wire format: each user sends exactly m messages, each an integer in
      ``[0, message_modulus)`` carried in ``ceil(bits_per_message / 8)`` bytes.
    * ``encode_many(x, rng)``: x is a 1-D array of floats in [0, 1] (InputRangeError
      otherwise); returns an ``(len(x), m)`` integer array of messages.
      ``encode_value(x, rng, clip=...)``: the m messages of one user, as Python ints.
    * ``analyze(messages, users)``: any shape holding exactly ``users · m`` messages
      (ShareCountError otherwise; ShareError for a message out of range); the result depends
      only on the multiset of messages. ``rng`` is used only by analyzers that randomize
      (the trusted curator of :mod:`cloaknet.protocols.central`). ``result_fields`` wraps
      it for a round's JSON result.
    * ``min_round_users`` / ``max_round_users``: the round sizes the guarantee and the
      analyzer are planned for (a chain's ``[round]`` must lie within them).
    * ``predicted_rmse()``: analytic RMSE for n = ``self.users``; ``predicted_rmse_for(x)``
      the RMSE for given inputs; ``expected_estimate(x)`` the analyzer's mean for given
      inputs (errors are estimate − Σ x).
    """

    name: str = ""
    users: int
    epsilon: float
    delta: float

    @property
    @abc.abstractmethod
    def messages_per_user(self) -> float:
        """Messages each user sends (fixed for every protocol here)."""

    @property
    @abc.abstractmethod
    def bits_per_message(self) -> int:
        """ceil(log2(message_modulus)): bits of one message."""

    @property
    @abc.abstractmethod
    def message_modulus(self) -> int:
        """Messages are integers in ``[0, message_modulus)``."""

    @property
    def message_count(self) -> int:
        """m as an int: the number of messages every user sends on the wire.

        :raises ParameterError: ``messages_per_user`` is not a whole number.
        """
        count = self.messages_per_user
        if count != int(count) or count < 1:
            raise ParameterError(
                f"protocol {self.name!r} sends {count} messages per user, not a whole number"
            )
        return int(count)

    @property
    def bytes_per_message(self) -> int:
        """Fixed width of one message on the wire."""
        return max(1, (self.bits_per_message + 7) // 8)

    @property
    def bytes_per_user(self) -> float:
        """``messages_per_user · bytes_per_message``."""
        return float(self.messages_per_user) * self.bytes_per_message

    @property
    def min_round_users(self) -> int:
        """The fewest users a round may have for the privacy guarantee to hold (privacy is
        planned for this many; fewer users hide each other less). Default: ``users``."""
        return self.users

    @property
    def max_round_users(self) -> int:
        """The most users in one round that the analyzer (its modulus, its decoding window)
        is planned for. Default: ``users``."""
        return self.users

    @abc.abstractmethod
    def encode_many(
        self, x: NDArray[np.float64], rng: RandomSource = SYSTEM_RANDOM
    ) -> NDArray[Any]:
        """Local randomizer of every user: an ``(n, m)`` array of messages."""

    def encode_value(
        self, x: float, rng: RandomSource = SYSTEM_RANDOM, *, clip: bool = False
    ) -> list[int]:
        """The local randomizer of one user: the m messages for input ``x``, each an int in
        ``[0, message_modulus)``.

        ``x`` is an int, float or Fraction in [0, 1]; with ``clip=True`` values outside are
        clipped to 0 or 1 (NaN never is). This default runs :meth:`encode_many` on the
        binary64 value of x (the protocols that round randomly quantize it as their analysis
        says); the cloak overrides it to quantize x exactly.

        :raises InputRangeError: x is not a number, is NaN, or lies outside [0, 1] without
            ``clip`` (see :func:`cloaknet.encoding.check_input`).
        """
        value = float(check_input(x, clip=clip))
        row = self.encode_many(np.array([value], dtype=np.float64), rng)
        return [int(v) for v in np.asarray(row).reshape(-1).tolist()]

    @abc.abstractmethod
    def analyze(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> float:
        """Analyzer: the estimate of Σ x_i from the shuffled messages of ``users`` users."""

    def result_fields(
        self, messages: NDArray[Any], users: int, *, rng: RandomSource = SYSTEM_RANDOM
    ) -> dict[str, object]:
        """The JSON-ready fields a round's result reports for these messages:
        ``{"estimate": float}`` plus protocol-specific fields (this default has none).
        Raises what :meth:`analyze` raises."""
        return {"estimate": float(self.analyze(messages, users, rng=rng))}

    def message_fold(self) -> MessageFold | None:
        """A fresh :class:`~cloaknet.protocols.fold.MessageFold` that computes
        :meth:`result_fields` from the messages one block at a time (so the analyzer never
        holds a round's messages as one array), or ``None``: this default, for a protocol
        whose analyzer needs them all at once (the analyzer then decodes the whole batch
        and calls :meth:`result_fields`)."""
        return None

    @abc.abstractmethod
    def predicted_rmse(self) -> float:
        """Analytic RMSE prediction for this instance (n = ``self.users``)."""

    @abc.abstractmethod
    def predicted_rmse_for(self, x: NDArray[np.float64]) -> float:
        """RMSE of the estimate for these inputs (about Σ x)."""

    def expected_estimate(self, x: NDArray[np.float64]) -> float:
        """The analyzer's expectation for inputs x (Σ x for an unbiased protocol)."""
        return float(np.sum(np.asarray(x, dtype=np.float64)))

    @abc.abstractmethod
    def parameters(self) -> dict[str, object]:
        """Protocol-specific parameters (JSON-ready)."""

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary: common fields plus :meth:`parameters` (an ε or δ that is
        not a finite number — no target was given — is reported as ``None``)."""
        info: dict[str, object] = {
            "protocol": self.name,
            "users": self.users,
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta if math.isfinite(self.delta) else None,
            "messages_per_user": self.messages_per_user,
            "bits_per_message": self.bits_per_message,
            "bytes_per_message": self.bytes_per_message,
            "bytes_per_user": self.bytes_per_user,
            "message_modulus": str(self.message_modulus)
            if self.message_modulus >= 1 << 53
            else self.message_modulus,
            "predicted_rmse": self.predicted_rmse(),
        }
        info.update(self.parameters())
        return info

    def _check_inputs(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        xs = np.asarray(x, dtype=np.float64)
        if xs.ndim != 1:
            raise ParameterError(f"inputs must be a 1-D array, got shape {xs.shape}")
        return xs

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(users={self.users}, epsilon={self.epsilon}, "
            f"delta={self.delta}, m={self.messages_per_user})"
        )
