"""The invisibility cloak's encoder (Algorithm 1) and analyzer (Algorithm 2), one user at a time.

For many users at once (simulations, experiments, benchmarks) see :mod:`cloaknet.vectorized`,
which implements the same maps on numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from cloaknet.errors import InputRangeError, ParameterError, ShareCountError, ShareError
from cloaknet.noise import sample_user_noise
from cloaknet.params import CloakParams, share_width
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource

__all__ = [
    "AnalyzerResult",
    "analyze",
    "analyze_sum",
    "check_input",
    "decode_share",
    "encode",
    "encode_share",
    "quantize",
    "split",
]


def check_input(x: float, *, clip: bool = False) -> float | Fraction:
    """One user's input, validated: ``x`` itself if it is a real number in [0, 1].

    ``x`` may be an int, a float or a :class:`~fractions.Fraction` (not a bool). With
    ``clip=True`` values outside [0, 1] (±inf included) are clipped to 0 or 1; NaN is always
    rejected.

    :raises InputRangeError: for a non-number, NaN, ±inf, or x outside [0, 1] without ``clip``.
    """
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise InputRangeError(f"input must be a real number, got {type(x).__name__}")
    if isinstance(x, float) and math.isnan(x):
        raise InputRangeError("input is NaN")
    if not clip and (isinstance(x, float) and math.isinf(x)):
        raise InputRangeError(f"input must be finite, got {x}")
    if not 0 <= x <= 1:
        if not clip:
            raise InputRangeError(f"input must lie in [0, 1], got {x} (pass clip=True to clip)")
        return 0 if x < 0 else 1
    return x


def quantize(x: float, precision: int, *, clip: bool = False) -> int:
    """x̄ = floor(x·k), exactly (the real product, not the rounded float product).

    :param x: the input, a finite number in [0, 1]; with ``clip=True`` values outside are
        clipped into [0, 1] (NaN is always rejected). See :func:`check_input`.
    :raises InputRangeError: for NaN, ±inf, or x outside [0, 1] without ``clip``.
    """
    return math.floor(Fraction(check_input(x, clip=clip)) * precision)


def split(value: int, messages: int, modulus: int, rng: RandomSource = SYSTEM_RANDOM) -> list[int]:
    """The core of Algorithm 1: m−1 shares uniform in {0..N−1} (exact, by rejection inside
    ``rng.randbelow``) and a last share so that the shares sum to ``value`` mod N.

    ``value`` may be any integer (negative after noise). m >= 1 and N >= 2 are accepted here so
    that experiments can study m < 4; :class:`CloakParams` enforces m >= 4 for the protocol.
    """
    if messages < 1:
        raise ParameterError(f"messages must be >= 1, got {messages}")
    if modulus < 2:
        raise ParameterError(f"modulus must be >= 2, got {modulus}")
    shares = [rng.randbelow(modulus) for _ in range(messages - 1)]
    shares.append((value - sum(shares)) % modulus)
    return shares


def encode(
    x: float,
    params: CloakParams,
    rng: RandomSource = SYSTEM_RANDOM,
    *,
    clip: bool = False,
) -> list[int]:
    """Algorithm 1, E_{N,k,m}(x): m shares in {0..N−1} summing to floor(x·k) mod N.

    In single-user mode the pre-randomizer adds w ~ D_{N,p} to floor(x·k) with probability q
    first (paper Section 2.4). All randomness comes from ``rng`` (default: the OS CSPRNG).

    :raises InputRangeError: as :func:`quantize`.
    """
    value = quantize(x, params.precision, clip=clip)
    if params.noise is not None:
        value += sample_user_noise(params.modulus, params.noise.scale, params.noise.q, rng)
    return split(value, params.messages, params.modulus, rng)


@dataclass(frozen=True)
class AnalyzerResult:
    """Output of Algorithm 2.

    ``raw_sum`` is z̄ = Σ y mod N; ``estimate`` is z̄/k, or the clamp 0 / n; ``clamped`` says
    which branch of Algorithm 2 was taken.
    """

    users: int
    raw_sum: int
    estimate_exact: Fraction
    clamped: Literal["low", "high"] | None

    @property
    def estimate(self) -> float:
        return float(self.estimate_exact)


def analyze_sum(raw_sum: int, users: int, params: CloakParams) -> AnalyzerResult:
    """Algorithm 2 given z̄ = Σ y mod N already computed (e.g. by a vectorized sum).

    z̄ > 2nk → 0 (the noisy sum wrapped below zero); nk < z̄ <= 2nk → n; otherwise z̄/k.
    Uses the round's actual number of users n, which must not exceed ``params.max_users``
    (the modulus was chosen with N > 3·max_users·k).

    :raises ParameterError: if n < 1 or n > max_users.
    :raises ShareError: if z̄ is not in [0, N).
    """
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise ParameterError(f"users must be a positive integer, got {users!r}")
    if users > params.max_users:
        raise ParameterError(
            f"round has {users} users but the parameters allow at most {params.max_users} "
            "(N > 3·n·k would fail)"
        )
    if not 0 <= raw_sum < params.modulus:
        raise ShareError(f"sum {raw_sum} is not reduced mod N")
    nk = users * params.precision
    if raw_sum > 2 * nk:
        return AnalyzerResult(users, raw_sum, Fraction(0), "low")
    if raw_sum > nk:
        return AnalyzerResult(users, raw_sum, Fraction(users), "high")
    return AnalyzerResult(users, raw_sum, Fraction(raw_sum, params.precision), None)


def analyze(shares: Iterable[int], users: int, params: CloakParams) -> AnalyzerResult:
    """Algorithm 2, A_{N,k,n}: sum the n·m shares mod N, then :func:`analyze_sum`.

    :raises ShareError: if a share is not an int in [0, N).
    :raises ShareCountError: if the number of shares is not n·m.
    """
    modulus = params.modulus
    total = 0
    count = 0
    for y in shares:
        if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < modulus:
            raise ShareError(f"share #{count} is not an integer in [0, N): {y!r}")
        total += y
        count += 1
    expected = users * params.messages
    if count != expected:
        raise ShareCountError(
            f"expected n·m = {users}·{params.messages} = {expected} shares, got {count}"
        )
    return analyze_sum(total % modulus, users, params)


def encode_share(value: int, modulus: int) -> bytes:
    """Fixed-width big-endian bytes of a share in [0, N) (width from :func:`share_width`)."""
    if not 0 <= value < modulus:
        raise ShareError(f"share {value} is not in [0, N)")
    return value.to_bytes(share_width(modulus), "big")


def decode_share(data: bytes | bytearray | memoryview, modulus: int) -> int:
    """Inverse of :func:`encode_share`; checks the length and that the value is < N."""
    width = share_width(modulus)
    if len(data) != width:
        raise ShareError(f"share must be {width} bytes, got {len(data)}")
    value = int.from_bytes(data, "big")
    if value >= modulus:
        raise ShareError("share is not reduced mod N")
    return value
