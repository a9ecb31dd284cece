"""``cloaknet experiment compare``: Figure 1 of Ghazi, Pagh and Velingker (2019), measured.

Figure 1 of the paper compares summation protocols in the shuffled model by asymptotic
formulas: messages per user, message size and expected error, for Cheu et al., Balle et al.
(the privacy blanket) and the invisibility cloak. This experiment builds every protocol of
:data:`cloaknet.protocols.PROTOCOLS` (those three plus the trusted-curator reference and the
split-and-mix protocol of Balle, Bell, Gascón and Nissim) on a grid of n and ε at one δ,
runs ``trials`` rounds of each, and reports the measured communication and error next to
the paper's formulas and the protocols' own predictions.

Input data
    For each n one input vector x ∈ [0, 1)^n is drawn once from numpy's PCG64 seeded with
    (``seed`` or 0, n). This is *data*, not protocol randomness: every protocol and every ε
    sees the same x at a given n, so the rows are comparable, and the error of a round is
    ``estimate − Σ x`` (Σ x summed exactly with :func:`math.fsum`).

Protocol randomness
    Every trial draws from its own :class:`~cloaknet.randomness.RandomSource`: the OS CSPRNG
    when ``seed`` is None, else a :class:`~cloaknet.randomness.DeterministicRandom` keyed by
    (seed, protocol, n, ε, δ, trial index), so a seeded run is replayable bit for bit and
    does not depend on ``jobs`` or on how trials are split between processes. numpy's
    generators are never used for protocol randomness.

Two simulation methods (the ``method`` column)
    ``messages``
        The real protocol: ``encode_many`` → :func:`cloaknet.vectorized.shuffle` →
        ``analyze``. Used whenever n·m <= ``max_messages_per_trial`` (default 2·10^6, which
        keeps the default grid at a few minutes on two cores), and always for the
        protocols without a sufficient-statistic sampler (blanket, central: one message per
        user).
    ``sufficient-statistic``
        Each analyzer depends on the messages only through one sum, so the trial draws that
        sum's distribution directly — exactly, not approximately:

        * cloak (both modes): the analyzer is Algorithm 2 on Σ y mod N, and the encoder's
          rows sum to floor(x_i·k) + w_i mod N, so Σ y ≡ Σ floor(x_i·k) + Σ w_i (mod N).
          The noise w is drawn by the encoder's own :func:`cloaknet.pipeline.noise_many`
          and the analyzer is :func:`cloaknet.encoding.analyze_sum` (what
          :meth:`CloakProtocol.analyze` calls). Given the same random stream the estimate is
          *identical* to the messages path (the encoder draws the noise first).
        * bbgn: Σ shares ≡ Σ x̄_i + Σ Z_i (mod q), with x̄ from
          :func:`cloaknet.protocols.base.randomized_round` and Z from
          :meth:`BBGNProtocol.noise_many`, drawn in the encoder's order; the protocol's own
          ``analyze`` then decodes a canonical multiset with that sum (one message equal to
          the residue, the others 0; 8·n·m bytes of memory). Again identical to the messages
          path given the same stream.
        * cheu: the analyzer counts the ones C among the n·r bits. With S = Σ x̄_i unary ones
          (randomized rounding as in the encoder) and slots replaced independently with
          probability p by a uniform bit, a one becomes a zero, and a zero a one, each with
          probability exactly p/2 (the encoder's threshold is even), independently per slot;
          so C = S − Bin(S, p/2) + Bin(n·r − S, p/2) (the per-user kept/flipped counts,
          summed). The binomials are drawn exactly from uniform bits by
          :func:`binomial_dyadic`; the estimate is the analyzer's formula
          (C − p·n·r/2)/((1 − p)·k) with the exact rational p.

        The test-suite checks that both methods agree in distribution (and exactly, stream
        for stream, for the cloak and bbgn).

Statistics per (protocol, n, ε)
    measured RMSE = sqrt(mean of error²) over the trials; its 95% interval is a χ² interval
    with kurtosis-adjusted degrees of freedom (:func:`rmse_interval`): exact for Gaussian
    errors, approximate otherwise (a deterministic error, as the sum-preserving cloak's, gets
    the point interval). ``predicted_rmse`` is :meth:`SummationProtocol.predicted_rmse_for` on
    the fixed x (exact for blanket, cheu, central and bbgn; for the cloak the bias is exact and
    the noise variance exact, clamping ignored); ``predicted_rmse_generic`` is
    :meth:`SummationProtocol.predicted_rmse`: an upper bound over all inputs for the others,
    but the planner's model (uniform fractional parts) for the cloak.

Outputs in ``out``: ``compare.csv`` (one row per cell), ``trials.csv`` (one row per round),
``error_vs_users.png``, ``communication_vs_users.png``, ``settings.json`` and ``report.md``.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray
from rich.console import Console

from cloaknet.encoding import analyze_sum
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.experiments.common import (
    default_jobs,
    fmt,
    markdown_table,
    pyplot,
    run_parallel,
    write_csv,
)
from cloaknet.pipeline import noise_many
from cloaknet.protocols import (
    PROTOCOLS,
    BBGNProtocol,
    CheuProtocol,
    CloakProtocol,
    SummationProtocol,
    make_protocol,
)
from cloaknet.protocols.base import randomized_round
from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom, RandomSource
from cloaknet.vectorized import quantize, shuffle, sum_mod

__all__ = [
    "DEFAULT_MESSAGE_LIMIT",
    "FAST_PATH_PROTOCOLS",
    "CompareSettings",
    "Method",
    "binomial_dyadic",
    "binomial_half",
    "chi2_quantile",
    "choose_method",
    "input_vector",
    "rmse_interval",
    "run_compare_experiment",
    "simulate_trial",
    "trial_rng",
]

Method = Literal["messages", "sufficient-statistic"]

DEFAULT_USERS: Final[tuple[int, ...]] = (100, 1000, 10_000, 100_000, 1_000_000)
QUICK_USERS: Final[tuple[int, ...]] = (100, 1000, 10_000)
DEFAULT_EPSILONS: Final[tuple[float, ...]] = (0.5, 1.0, 2.0)
QUICK_EPSILONS: Final[tuple[float, ...]] = (1.0,)
DEFAULT_DELTA: Final[float] = 1e-6
DEFAULT_TRIALS: Final[int] = 50
QUICK_TRIALS: Final[int] = 10
#: Largest n·m simulated message by message (encode → shuffle → analyze) per trial.
DEFAULT_MESSAGE_LIMIT: Final[int] = 2_000_000
#: Protocols with an exact sufficient-statistic sampler (module doc).
FAST_PATH_PROTOCOLS: Final[frozenset[str]] = frozenset(
    {"cloak-single-user", "cloak-sum-preserving", "cheu", "bbgn"}
)
#: The ε and δ of the reproduced Figure 1 table.
FIGURE_EPSILON: Final[float] = 1.0
FIGURE_DELTA: Final[float] = 1e-6
#: Protocols protecting single-user changes in the shuffled model (central is a trusted
#: curator; the sum-preserving cloak protects a weaker neighbouring notion).
SINGLE_USER_SHUFFLED: Final[tuple[str, ...]] = ("cloak-single-user", "blanket", "cheu", "bbgn")

#: Figure 1 of the paper, verbatim up to typography: (reference, messages per user, message
#: size in bits, expected error, neighbouring notion). None: the protocol is not in Figure 1.
PAPER_FIGURE_1: Final[dict[str, tuple[str, str, str, str, str] | None]] = {
    "cheu": (
        "Cheu et al.",
        "ε√n",
        "1",
        "(1/ε)·log(n/δ)",
        "single-user change",
    ),
    "blanket": (
        "Balle et al.",
        "1",
        "log n",
        "n^(1/6)·log^(1/3)(1/δ) / ε^(2/3)",
        "single-user change",
    ),
    "cloak-single-user": (
        "New (line 1)",
        "log(n/(εδ))",
        "log(n/δ)",
        "(1/ε)·√log(1/δ)",
        "single-user change",
    ),
    "cloak-sum-preserving": (
        "New (line 2)",
        "m > log(n/(εδ))",
        "m",
        "2^(−m)",
        "sum-preserving change",
    ),
    "central": None,
    "bbgn": None,
}


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class CompareSettings:
    """The grid of one run; :meth:`default` fills in the presets.

    Invariants (ParameterError otherwise): ``users`` non-empty, each >= 2; ``epsilons``
    non-empty, each finite > 0; 0 < ``delta`` < 1; ``trials`` >= 2; ``jobs`` >= 1;
    ``protocols`` a non-empty subset of :data:`PROTOCOLS` without repeats;
    ``max_messages_per_trial`` >= 0 (0: every protocol with a sufficient-statistic sampler
    uses it).
    """

    users: tuple[int, ...]
    epsilons: tuple[float, ...]
    delta: float
    trials: int
    jobs: int
    seed: int | None
    quick: bool
    protocols: tuple[str, ...] = PROTOCOLS
    max_messages_per_trial: int = DEFAULT_MESSAGE_LIMIT

    def __post_init__(self) -> None:
        if not self.users or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in self.users
        ):
            raise ParameterError(f"users must be integers >= 2, got {self.users!r}")
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ParameterError(f"epsilons must be finite numbers > 0, got {self.epsilons!r}")
        if not 0.0 < self.delta < 1.0:
            raise ParameterError(f"delta must lie in (0, 1), got {self.delta!r}")
        if self.trials < 2:
            raise ParameterError(f"trials must be >= 2, got {self.trials}")
        if self.jobs < 1:
            raise ParameterError(f"jobs must be >= 1, got {self.jobs}")
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if not self.protocols or unknown or len(set(self.protocols)) != len(self.protocols):
            raise ParameterError(
                f"protocols must be distinct names from {', '.join(PROTOCOLS)}; "
                f"got {self.protocols!r}"
            )
        if self.max_messages_per_trial < 0:
            raise ParameterError("max_messages_per_trial must be >= 0")

    @classmethod
    def default(
        cls,
        *,
        users: Sequence[int] | None = None,
        epsilons: Sequence[float] | None = None,
        delta: float | None = None,
        trials: int | None = None,
        jobs: int | None = None,
        seed: int | None = None,
        quick: bool = False,
    ) -> CompareSettings:
        """The preset grid (``quick``: n ∈ {10², 10³, 10⁴}, ε = 1, 10 trials; otherwise
        n ∈ {10², …, 10⁶}, ε ∈ {0.5, 1, 2}, 50 trials), with any given argument overriding
        it; δ defaults to 10⁻⁶ and ``jobs`` to the number of CPUs. Users are sorted and
        deduplicated, as are the ε."""
        chosen_users = tuple(users) if users else (QUICK_USERS if quick else DEFAULT_USERS)
        chosen_eps = (
            tuple(epsilons) if epsilons else (QUICK_EPSILONS if quick else DEFAULT_EPSILONS)
        )
        return cls(
            users=tuple(sorted({int(n) for n in chosen_users})),
            epsilons=tuple(sorted({float(e) for e in chosen_eps})),
            delta=DEFAULT_DELTA if delta is None else float(delta),
            trials=trials or (QUICK_TRIALS if quick else DEFAULT_TRIALS),
            jobs=jobs or default_jobs(),
            seed=seed,
            quick=quick,
        )


# --------------------------------------------------------------------------- data


def input_vector(users: int, seed: int | None) -> NDArray[np.float64]:
    """The fixed input data at n = ``users``: n floats uniform in [0, 1) from numpy's PCG64
    seeded with (seed or 0, n). Data, not protocol randomness (module doc); the same for
    every protocol and ε."""
    data_seed = 0 if seed is None else seed & (2**64 - 1)
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([data_seed, users])))
    x: NDArray[np.float64] = generator.random(users)
    return x


def trial_rng(
    seed: int | None, protocol: str, users: int, epsilon: float, delta: float, trial: int
) -> RandomSource:
    """The protocol randomness of one trial: the OS CSPRNG if ``seed`` is None, else a
    :class:`DeterministicRandom` keyed by every coordinate of the trial."""
    if seed is None:
        return SYSTEM_RANDOM
    return DeterministicRandom(
        f"cloaknet-compare/{seed}/{protocol}/{users}/{epsilon!r}/{delta!r}/{trial}"
    )


# --------------------------------------------------------------------------- exact binomials

#: Below this many trials, Bin(count, 1/2) is the popcount of ``count`` fresh bits.
DIRECT_LIMIT: Final[int] = 1 << 16
_POPCOUNT_BLOCK: Final[int] = 1 << 22
_POPCOUNT8: Final[NDArray[np.uint8]] = np.array(
    [bin(i).count("1") for i in range(256)], dtype=np.uint8
)
_LN2: Final[float] = math.log(2.0)
# Relative slack on float results (exp, log1p, sums) in the rejection test: far beyond the
# few-ulp errors of binary64 libm functions; a decision inside the slack is made exactly.
_SLACK: Final[float] = 2.0**-40
_LOG_CHUNK: Final[int] = 1 << 20


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 0:
        raise ParameterError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _popcount_bits(count: int, rng: RandomSource) -> int:
    """Number of ones among ``count`` fresh uniform bits (ceil(count/8) bytes of ``rng``)."""
    full, rest = divmod(count, 8)
    total = 0
    for start in range(0, full, _POPCOUNT_BLOCK):
        size = min(_POPCOUNT_BLOCK, full - start)
        data = np.frombuffer(rng.token_bytes(size), dtype=np.uint8)
        total += int(_POPCOUNT8[data].sum(dtype=np.int64))
    if rest:
        total += (rng.token_bytes(1)[0] & ((1 << rest) - 1)).bit_count()
    return total


def _geometric_half(rng: RandomSource) -> int:
    """K with P[K = k] = 2^−(k+1): the number of zero bits before the first one."""
    skipped = 0
    while True:
        word = int.from_bytes(rng.token_bytes(8), "big")
        if word:
            return skipped + 64 - word.bit_length()
        skipped += 64


def _range_product(low: int, high: int) -> int:
    """Π_{v=low}^{high} v (1 if high < low), by balanced splitting."""
    if high < low:
        return 1
    if high - low < 16:
        return math.prod(range(low, high + 1))
    mid = (low + high) // 2
    return _range_product(low, mid) * _range_product(mid + 1, high)


def _log_ratio(mu: int, d: int) -> tuple[float, float]:
    """(L, E): L ≈ ln Π_{i=1}^{d} (μ+1−i)/(μ+i) in binary64 and E >= the absolute error of L
    (with a wide margin: 2^−40 relative per term plus the summation error)."""
    total = 0.0
    magnitude = 0.0
    sensitivity = 0.0
    for start in range(1, d + 1, _LOG_CHUNK):
        i = np.arange(start, min(d, start + _LOG_CHUNK - 1) + 1, dtype=np.float64)
        flip = (2.0 * i - 1.0) / (mu + i)  # 1 − (μ+1−i)/(μ+i), in (0, 1)
        terms = np.log1p(-flip)
        total += float(terms.sum())
        magnitude += float(-terms.sum())
        sensitivity += float(np.sum((2.0 * i - 1.0) / (mu + 1.0 - i)))  # flip/(1 − flip)
    error = _SLACK * ((d + 4) * magnitude + sensitivity + 1.0)
    return total, error


def _accept(mu: int, d: int, block: int, rng: RandomSource, *, force_exact: bool) -> bool:
    """One Bernoulli trial with probability a = 2^(block−1) · C(2μ, μ+d)/C(2μ, μ), which is
    <= 1 whenever d >= block·w with w > √μ (see :func:`_binomial_half_rejection`).

    U = (u + V)/2^64 with u a 64-bit uniform integer and V uniform in [0, 1); the trial
    succeeds iff U < a. It is decided from u and binary64 bounds on a when they are
    conclusive, and otherwise exactly with integers (V's comparison with a rational is a
    fresh exact Bernoulli trial), so the result is exact either way.
    """
    u = int.from_bytes(rng.token_bytes(8), "big")
    if not force_exact:
        # cheap exact rejection first: a <= 2^(block−1) · exp(−d²/(μ+d))
        cap = (block - 1) * _LN2 - d * d / (mu + d) + _SLACK * (block + 2)
        if cap < 0.0 and u >= math.ceil(math.ldexp(math.exp(cap) * (1 + _SLACK), 64)):
            return False
        log_ratio, error = _log_ratio(mu, d)
        log_a = (block - 1) * _LN2 + log_ratio
        low = math.exp(log_a - error) * (1 - _SLACK)
        high = math.exp(log_a + error) * (1 + _SLACK)
        if u + 1 <= math.floor(math.ldexp(min(low, 1.0), 64)):
            return True
        if high < 1.0 and u >= math.ceil(math.ldexp(high, 64)):
            return False
    numerator = _range_product(mu + 1 - d, mu)
    denominator = _range_product(mu + 1, mu + d)
    if block >= 1:
        numerator <<= block - 1
    else:
        denominator <<= 1
    gap = (numerator << 64) - u * denominator  # (a − u/2^64) · 2^64 · denominator
    if gap <= 0:
        return False
    if gap >= denominator:
        return True
    return rng.randbelow(denominator) < gap


def _binomial_half_rejection(count: int, rng: RandomSource, *, force_exact: bool = False) -> int:
    """Exact Bin(count, 1/2) by rejection, using O(√count) float work per attempt and a
    handful of random words (``force_exact`` decides every acceptance with integers; for
    tests).

    For count = 2μ + 1 the result is Bin(2μ, 1/2) plus one fair bit. For 2μ: let
    w = isqrt(μ) + 1 > √μ. Propose a sign s (fair bit), a block K with P[K = k] = 2^−(k+1)
    and an offset I uniform in [0, w); the deviation is d = K·w + I (s = +) or
    d = K·w + I + 1 (s = −, value μ − d). Every integer deviation j has exactly one
    proposal, of probability 2^−(k+2)/w. Accept with probability
    a = 2^(k−1)·r(d), r(d) = C(2μ, μ+d)/C(2μ, μ) (0 for d > μ). Then P[propose j and accept]
    = r(|j|)/(8w) ∝ P[Bin(2μ, 1/2) = μ + j], so accepted values have exactly the binomial law.
    a <= 1: r(d) <= exp(−Σ_{i<=d} (2i−1)/(μ+i)) <= exp(−d²/(2μ)) <= exp(−k²/2) for
    k·w <= d <= μ, and 2^(k−1)·exp(−k²/2) <= e^(−1/2) < 1 for every k >= 0. The acceptance
    rate is about Σ_j r(j)/(8w) ≈ √(πμ)/(8w) ≈ 0.22.
    """
    if count % 2:
        return _binomial_half_rejection(count - 1, rng, force_exact=force_exact) + (
            rng.token_bytes(1)[0] & 1
        )
    mu = count // 2
    if mu == 0:
        return 0
    width = math.isqrt(mu) + 1
    while True:
        block = _geometric_half(rng)
        offset = rng.randbelow(width)
        negative = rng.token_bytes(1)[0] & 1
        d = block * width + offset + negative
        if d > mu:
            continue
        if _accept(mu, d, block, rng, force_exact=force_exact):
            return mu - d if negative else mu + d


def binomial_half(count: int, rng: RandomSource, *, direct_limit: int = DIRECT_LIMIT) -> int:
    """An exact draw of Bin(``count``, 1/2) from ``rng``'s uniform bytes.

    ``count <= direct_limit``: the popcount of ``count`` fresh bits. Otherwise the rejection
    sampler :func:`_binomial_half_rejection` (constant expected number of attempts, each
    O(√count) binary64 work plus an exact integer fallback in the rare undecided cases).

    :raises ParameterError: ``count`` is not a non-negative integer.
    """
    n = _check_count("count", count)
    if n <= direct_limit:
        return _popcount_bits(n, rng)
    return _binomial_half_rejection(n, rng)


def binomial_dyadic(
    count: int,
    numerator: int,
    bits: int,
    rng: RandomSource,
    *,
    direct_limit: int = DIRECT_LIMIT,
) -> int:
    """An exact draw of Bin(``count``, numerator/2^bits).

    Each of the ``count`` Bernoulli trials compares a uniform ``bits``-bit integer U with
    T = ``numerator`` (success iff U < T), most significant bit first. At each level the
    trials still tied with T's prefix split into those whose next bit of U is 1 and 0
    (a Bin(active, 1/2) draw, :func:`binomial_half`); where T's bit is 1 the zeros succeed
    and the ones stay tied, where it is 0 the ones fail and the zeros stay tied; trials tied
    to the end have U = T and fail.

    :raises ParameterError: negative ``count``, ``bits`` < 0, or ``numerator`` outside
        [0, 2^bits].
    """
    n = _check_count("count", count)
    width = _check_count("bits", bits)
    t = _check_count("numerator", numerator)
    if t > 1 << width:
        raise ParameterError(f"numerator must be <= 2**bits, got {t} > 2**{width}")
    if t == 1 << width:
        return n
    active, successes = n, 0
    for level in range(width - 1, -1, -1):
        if active == 0:
            break
        ones = binomial_half(active, rng, direct_limit=direct_limit)
        if (t >> level) & 1:
            successes += active - ones
            active = ones
        else:
            active -= ones
    return successes


# --------------------------------------------------------------------------- one trial


def choose_method(protocol: SummationProtocol, users: int, limit: int) -> Method:
    """``messages`` if n·m <= ``limit`` or the protocol has no sufficient-statistic sampler,
    else ``sufficient-statistic``."""
    if protocol.name not in FAST_PATH_PROTOCOLS:
        return "messages"
    if users * protocol.messages_per_user <= limit:
        return "messages"
    return "sufficient-statistic"


@dataclass
class _Simulator:
    """One protocol instance and one input vector, with the deterministic parts of the
    sufficient-statistic samplers computed once."""

    protocol: SummationProtocol
    x: NDArray[np.float64]
    method: Method
    direct_limit: int = DIRECT_LIMIT
    _floor_sum: int | None = None
    _canonical: NDArray[Any] | None = field(default=None, repr=False)

    def estimate(self, rng: RandomSource) -> float:
        if self.method == "messages":
            return _messages_estimate(self.protocol, self.x, rng)
        if isinstance(self.protocol, CloakProtocol):
            return self._cloak(self.protocol, rng)
        if isinstance(self.protocol, BBGNProtocol):
            return self._bbgn(self.protocol, rng)
        if isinstance(self.protocol, CheuProtocol):
            return self._cheu(self.protocol, rng)
        raise ParameterError(f"protocol {self.protocol.name!r} has no sufficient-statistic path")

    def _cloak(self, protocol: CloakProtocol, rng: RandomSource) -> float:
        params = protocol.params
        n = int(self.x.shape[0])
        if self._floor_sum is None:
            self._floor_sum = sum_mod(quantize(self.x, params.precision), params.modulus)
        noise = noise_many(params, n, rng)  # the encoder's own pre-randomizer
        raw = (self._floor_sum + sum_mod(noise, params.modulus)) % params.modulus
        return analyze_sum(raw, n, params).estimate

    def _bbgn(self, protocol: BBGNProtocol, rng: RandomSource) -> float:
        plan = protocol.plan
        n = int(self.x.shape[0])
        rounded = randomized_round(self.x, plan.precision, rng)
        noise = protocol.noise_many(n, rng)
        raw = (sum_mod(rounded, plan.modulus) + sum_mod(noise, plan.modulus)) % plan.modulus
        if self._canonical is None:
            dtype: Any = np.uint64 if plan.modulus < 1 << 63 else object
            self._canonical = np.zeros(n * plan.messages, dtype=dtype)
        self._canonical[0] = raw
        return protocol.analyze(self._canonical.reshape(n, plan.messages), n, rng=rng)

    def _cheu(self, protocol: CheuProtocol, rng: RandomSource) -> float:
        if protocol.p_threshold % 2:
            raise ParameterError("cheu: the flip probability is p/2 only for an even threshold")
        flip = protocol.p_exact / 2
        bits = flip.denominator.bit_length() - 1
        if flip.denominator != 1 << bits:
            raise ParameterError("cheu: the replacement probability must be dyadic")
        n = int(self.x.shape[0])
        k, r = protocol.precision, protocol.bits
        ones = int(np.sum(randomized_round(self.x, k, rng), dtype=np.int64))
        lost = binomial_dyadic(ones, flip.numerator, bits, rng, direct_limit=self.direct_limit)
        gained = binomial_dyadic(
            n * r - ones, flip.numerator, bits, rng, direct_limit=self.direct_limit
        )
        count = ones - lost + gained
        p = protocol.p_exact
        return float((count - p * n * r / 2) / ((1 - p) * k))


def _messages_estimate(
    protocol: SummationProtocol, x: NDArray[np.float64], rng: RandomSource
) -> float:
    messages = protocol.encode_many(x, rng)
    mixed = shuffle(messages, rng)
    return protocol.analyze(mixed, int(x.shape[0]), rng=rng)


def simulate_trial(
    protocol: SummationProtocol,
    x: NDArray[np.float64],
    method: Method,
    rng: RandomSource,
    *,
    direct_limit: int = DIRECT_LIMIT,
) -> float:
    """The analyzer's estimate of Σ x for one round of ``protocol`` on inputs ``x``, by
    ``method`` (module doc); ``direct_limit`` is passed to the exact binomial sampler.

    :raises ParameterError: ``sufficient-statistic`` for a protocol without that path.
    """
    return _Simulator(protocol, x, method, direct_limit).estimate(rng)


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """Trials ``first`` … ``first + count − 1`` of one (protocol, n, ε) cell."""

    protocol: str
    users: int
    epsilon: float
    delta: float
    seed: int | None
    first: int
    count: int
    method: Method


def run_task(task: Task) -> list[dict[str, Any]]:
    """Simulate one chunk of trials (a picklable top-level worker); one dict per trial."""
    x = input_vector(task.users, task.seed)
    truth = math.fsum(x.tolist())
    protocol = make_protocol(task.protocol, task.users, task.epsilon, task.delta)
    simulator = _Simulator(protocol, x, task.method)
    rows = []
    for trial in range(task.first, task.first + task.count):
        rng = trial_rng(task.seed, task.protocol, task.users, task.epsilon, task.delta, trial)
        started = time.perf_counter()
        estimate = simulator.estimate(rng)
        rows.append(
            {
                "protocol": task.protocol,
                "users": task.users,
                "epsilon": task.epsilon,
                "delta": task.delta,
                "trial": trial,
                "method": task.method,
                "estimate": estimate,
                "true_sum": truth,
                "error": estimate - truth,
                "seconds": time.perf_counter() - started,
            }
        )
    return rows


def _trial_cost(protocol: SummationProtocol, users: int, method: Method) -> float:
    """Rough cost of one trial in bytes of randomness plus sorting (for load balancing)."""
    if method == "messages":
        return users * protocol.messages_per_user * (protocol.bytes_per_message + 12.0)
    if isinstance(protocol, BBGNProtocol):
        return 21.0 * users + 8.0 * users * protocol.messages_per_user
    return 8.0 * users


# --------------------------------------------------------------------------- statistics


def _chi2_sf(x: float, df: int) -> float:
    """P[χ²_df > x] for an integer df >= 1, by the finite series for integer and
    half-integer shapes (terms in log space, so large df do not overflow)."""
    if x <= 0.0:
        return 1.0
    half = x / 2.0
    log_half = math.log(half)
    if df % 2 == 0:
        return math.fsum(
            math.exp(-half + j * log_half - math.lgamma(j + 1.0)) for j in range(df // 2)
        )
    head = math.erfc(math.sqrt(half))
    return head + math.fsum(
        math.exp(-half + (j - 0.5) * log_half - math.lgamma(j + 0.5))
        for j in range(1, (df - 1) // 2 + 1)
    )


def chi2_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of χ²_df for an integer df >= 1: bisection on the exact
    survival function (:func:`_chi2_sf`) to 1e-12 relative for df <= 1000, the
    Wilson–Hilferty approximation (relative error below 1e-4 there) above.

    :raises ParameterError: probability outside (0, 1) or df < 1.
    """
    if not 0.0 < probability < 1.0:
        raise ParameterError(f"probability must lie in (0, 1), got {probability}")
    if df < 1:
        raise ParameterError(f"df must be >= 1, got {df}")
    if df > 1000:
        z = statistics.NormalDist().inv_cdf(probability)
        c = 2.0 / (9.0 * df)
        return float(df * (1.0 - c + z * math.sqrt(c)) ** 3)
    target = 1.0 - probability
    low, high = 0.0, df + 40.0 * math.sqrt(df) + 100.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _chi2_sf(mid, df) > target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return 0.5 * (low + high)


def rmse_interval(errors: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(RMSE, low, high): the RMSE sqrt(Σe²/t) of the t errors and an approximate ``level``
    interval for the true RMSE.

    The interval treats ν·MSE/σ² as χ²_ν with Satterthwaite's effective degrees of freedom
    ν = round(2t/(κ − 1)), κ = t·Σe⁴/(Σe²)² (so that Var(MSE) matches the sample's), clamped
    to [1, t]: for Gaussian errors ν = t and the interval is the exact χ² interval; heavy
    tails (the Laplace-like noise of central and bbgn, κ ≈ 6) widen it. Coverage is then
    about 95% for Gaussian errors and about 90% for Laplace errors at 50 trials (checked by
    simulation when this was written). Identical errors (a deterministic estimate) give the
    point interval.

    :raises ParameterError: no errors, or level outside (0, 1).
    """
    t = len(errors)
    if t == 0:
        raise ParameterError("no errors to summarise")
    if not 0.0 < level < 1.0:
        raise ParameterError(f"level must lie in (0, 1), got {level}")
    total = math.fsum(e * e for e in errors)
    rmse = math.sqrt(total / t)
    if len(set(errors)) == 1 or total == 0.0:
        return rmse, rmse, rmse
    kurtosis = t * math.fsum(e**4 for e in errors) / (total * total)
    excess = kurtosis - 1.0
    dof = t if excess <= 2.0 else max(1, min(t, round(2.0 * t / excess)))
    mse = total / t
    low = math.sqrt(dof * mse / chi2_quantile((1.0 + level) / 2.0, dof))
    high = math.sqrt(dof * mse / chi2_quantile((1.0 - level) / 2.0, dof))
    return rmse, low, high


# --------------------------------------------------------------------------- the run

ROW_COLUMNS: Final[tuple[str, ...]] = (
    "protocol",
    "users",
    "epsilon",
    "delta",
    "feasible",
    "reason",
    "method",
    "messages_per_user",
    "bits_per_message",
    "bytes_per_message",
    "bytes_per_user",
    "precision",
    "predicted_rmse",
    "predicted_rmse_generic",
    "predicted_bias",
    "measured_rmse",
    "rmse_ci_low",
    "rmse_ci_high",
    "mean_error",
    "std_error",
    "max_abs_error",
    "measured_over_predicted",
    "trials",
    "seconds",
)
TRIAL_COLUMNS: Final[tuple[str, ...]] = (
    "protocol",
    "users",
    "epsilon",
    "delta",
    "trial",
    "method",
    "estimate",
    "true_sum",
    "error",
    "seconds",
)


@dataclass
class _Cell:
    name: str
    users: int
    epsilon: float
    protocol: SummationProtocol | None
    reason: str | None
    method: Method | None
    predicted: float | None = None
    predicted_generic: float | None = None
    bias: float | None = None


def _build_cells(settings: CompareSettings) -> list[_Cell]:
    cells = []
    for n in settings.users:
        x = input_vector(n, settings.seed)
        truth = math.fsum(x.tolist())
        for eps in settings.epsilons:
            for name in settings.protocols:
                try:
                    protocol = make_protocol(name, n, eps, settings.delta)
                except (InfeasiblePlanError, ParameterError) as exc:
                    cells.append(_Cell(name, n, eps, None, f"{type(exc).__name__}: {exc}", None))
                    continue
                method = choose_method(protocol, n, settings.max_messages_per_trial)
                cells.append(
                    _Cell(
                        name,
                        n,
                        eps,
                        protocol,
                        None,
                        method,
                        predicted=float(protocol.predicted_rmse_for(x)),
                        predicted_generic=float(protocol.predicted_rmse()),
                        bias=float(protocol.expected_estimate(x)) - truth,
                    )
                )
    return cells


def _tasks(settings: CompareSettings, cells: Sequence[_Cell]) -> list[Task]:
    costed: list[tuple[float, _Cell]] = []
    for cell in cells:
        if cell.protocol is not None and cell.method is not None:
            costed.append((_trial_cost(cell.protocol, cell.users, cell.method), cell))
    if not costed:
        return []
    total = sum(cost for cost, _ in costed) * settings.trials
    target = max(1.0, total / (settings.jobs * 8.0))
    tasks: list[tuple[float, Task]] = []
    for cost, cell in costed:
        assert cell.method is not None
        chunk = max(1, min(settings.trials, math.floor(target / max(cost, 1.0))))
        for first in range(0, settings.trials, chunk):
            count = min(chunk, settings.trials - first)
            task = Task(
                cell.name,
                cell.users,
                cell.epsilon,
                settings.delta,
                settings.seed,
                first,
                count,
                cell.method,
            )
            tasks.append((cost * count, task))
    tasks.sort(key=lambda item: -item[0])  # heaviest first: better load balance
    return [task for _, task in tasks]


def _row(cell: _Cell, settings: CompareSettings, trials: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {column: None for column in ROW_COLUMNS}
    row.update(
        protocol=cell.name,
        users=cell.users,
        epsilon=cell.epsilon,
        delta=settings.delta,
        feasible=cell.protocol is not None,
        reason=cell.reason,
        method=cell.method,
    )
    protocol = cell.protocol
    if protocol is None:
        return row
    info = protocol.describe()
    precision = info.get("precision")
    row.update(
        messages_per_user=float(protocol.messages_per_user),
        bits_per_message=int(protocol.bits_per_message),
        bytes_per_message=int(protocol.bytes_per_message),
        bytes_per_user=float(protocol.bytes_per_user),
        precision=int(precision) if isinstance(precision, int) else None,
        predicted_rmse=cell.predicted,
        predicted_rmse_generic=cell.predicted_generic,
        predicted_bias=cell.bias,
    )
    errors = [float(t["error"]) for t in sorted(trials, key=lambda t: int(t["trial"]))]
    if errors:
        rmse, low, high = rmse_interval(errors)
        mean = math.fsum(errors) / len(errors)
        spread = math.sqrt(math.fsum((e - mean) ** 2 for e in errors) / max(1, len(errors) - 1))
        row.update(
            measured_rmse=rmse,
            rmse_ci_low=low,
            rmse_ci_high=high,
            mean_error=mean,
            std_error=spread,
            max_abs_error=max(abs(e) for e in errors),
            measured_over_predicted=rmse / cell.predicted if cell.predicted else None,
            trials=len(errors),
            seconds=math.fsum(float(t["seconds"]) for t in trials),
        )
    return row


def run_compare_experiment(
    out: Path, settings: CompareSettings, console: Console | None = None
) -> dict[str, Any]:
    """Run the grid of ``settings``; write ``compare.csv``, ``trials.csv``, the PNG plots,
    ``settings.json`` and ``report.md`` into ``out`` (created if needed).

    Returns ``{"rows": [...], "seconds": float}``: one JSON-ready dict per (protocol, n, ε)
    with the keys of :data:`ROW_COLUMNS` (None where not applicable, e.g. the measurements of
    an infeasible cell), and the wall-clock time of the whole run.
    """
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    cells = _build_cells(settings)
    tasks = _tasks(settings, cells)
    trial_rows = run_parallel(
        run_task,
        tasks,
        jobs=settings.jobs,
        label="protocol rounds",
        weight=lambda t: t.count,
        console=console,
    )
    grouped: dict[tuple[str, int, float], list[dict[str, Any]]] = {}
    for trial in trial_rows:
        key = (str(trial["protocol"]), int(trial["users"]), float(trial["epsilon"]))
        grouped.setdefault(key, []).append(trial)
    rows = [_row(c, settings, grouped.get((c.name, c.users, c.epsilon), [])) for c in cells]
    write_csv(out / "compare.csv", rows, ROW_COLUMNS)
    write_csv(out / "trials.csv", trial_rows, TRIAL_COLUMNS)
    _plot_error(out / "error_vs_users.png", settings, rows)
    _plot_communication(out / "communication_vs_users.png", settings, rows)
    seconds = time.perf_counter() - started
    (out / "settings.json").write_text(json.dumps(asdict(settings), indent=2) + "\n")
    (out / "report.md").write_text(_report(settings, rows, seconds))
    return {"rows": rows, "seconds": seconds}


# --------------------------------------------------------------------------- plots

_STYLE: Final[dict[str, tuple[str, str]]] = {
    "cloak-single-user": ("tab:blue", "o"),
    "cloak-sum-preserving": ("tab:cyan", "D"),
    "blanket": ("tab:red", "v"),
    "cheu": ("tab:orange", "s"),
    "central": ("black", "x"),
    "bbgn": ("tab:green", "^"),
}
_EPS_STYLE: Final[tuple[str, ...]] = ("-", "--", ":", "-.")


def _feasible(rows: Sequence[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    out = [
        r for r in rows if r["feasible"] and all(r[key] == value for key, value in match.items())
    ]
    return sorted(out, key=lambda r: int(r["users"]))


def _plot_error(path: Path, settings: CompareSettings, rows: Sequence[dict[str, Any]]) -> None:
    plt = pyplot()
    count = len(settings.epsilons)
    fig, axes = plt.subplots(1, count, figsize=(5.2 * count + 1, 4.6), squeeze=False)
    for ax, eps in zip(axes[0], settings.epsilons, strict=True):
        for name in settings.protocols:
            color, marker = _STYLE.get(name, ("gray", "."))
            sub = [r for r in _feasible(rows, protocol=name, epsilon=eps) if r["measured_rmse"]]
            if not sub:
                continue
            ns = [r["users"] for r in sub]
            rmse = np.array([r["measured_rmse"] for r in sub])
            below = rmse - np.array([r["rmse_ci_low"] for r in sub])
            above = np.array([r["rmse_ci_high"] for r in sub]) - rmse
            ax.errorbar(
                ns,
                rmse,
                yerr=[below, above],
                color=color,
                marker=marker,
                linestyle="none",
                capsize=3,
                label=f"{name} measured",
            )
            ax.plot(
                ns,
                [r["predicted_rmse"] for r in sub],
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"{name} predicted",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("users n")
        ax.set_ylabel("RMSE of the estimated sum")
        ax.set_title(f"ε = {eps:g}, δ = {settings.delta:g}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle("error vs n: measured RMSE (95% CI) and prediction (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_communication(
    path: Path, settings: CompareSettings, rows: Sequence[dict[str, Any]]
) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for name in settings.protocols:
        color, marker = _STYLE.get(name, ("gray", "."))
        for index, eps in enumerate(settings.epsilons):
            sub = _feasible(rows, protocol=name, epsilon=eps)
            if not sub:
                continue
            ns = [r["users"] for r in sub]
            style = _EPS_STYLE[index % len(_EPS_STYLE)]
            label = f"{name}, ε = {eps:g}"
            axes[0].plot(
                ns,
                [r["bytes_per_user"] for r in sub],
                color=color,
                marker=marker,
                linestyle=style,
                label=label,
            )
            axes[1].plot(
                ns,
                [r["messages_per_user"] for r in sub],
                color=color,
                marker=marker,
                linestyle=style,
                label=label,
            )
    for ax, what in zip(axes, ("bytes per user", "messages per user"), strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("users n")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(f"communication vs n (δ = {settings.delta:g}; line style: ε)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- report


def _num(value: Any) -> Any:
    """Integral floats as ints (1000.0 → 1000, not fmt's "1e+03"); anything else unchanged."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def _delta_label(delta: float) -> str:
    exponent = round(math.log10(delta))
    return f"10^{exponent}" if math.isclose(delta, 10.0**exponent, rel_tol=1e-12) else f"{delta:g}"


def _n_label(n: int) -> str:
    exponent = round(math.log10(n)) if n > 0 else 0
    return f"10^{exponent}" if 10**exponent == n else f"{n:,}"


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y against log x (None with fewer than two points)."""
    pts = [(math.log(a), math.log(b)) for a, b in points if a > 0 and b > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _reference_epsilon(settings: CompareSettings) -> float:
    return min(settings.epsilons, key=lambda e: (abs(math.log(e / FIGURE_EPSILON)), e))


def _cell(rows: Sequence[dict[str, Any]], name: str, n: int, eps: float) -> dict[str, Any] | None:
    for r in rows:
        if r["protocol"] == name and r["users"] == n and r["epsilon"] == eps:
            return r
    return None


def _figure_table(settings: CompareSettings, rows: Sequence[dict[str, Any]], eps: float) -> str:
    headers = ["protocol", "quantity", "paper (Figure 1)"] + [
        f"n = {_n_label(n)}" for n in settings.users
    ]
    table: list[list[Any]] = []
    for name in settings.protocols:
        paper = PAPER_FIGURE_1.get(name)
        label = f"{name} ({paper[0]})" if paper else f"{name} (not in Figure 1)"
        label = label.replace("(New (line ", "(New, line ").replace("))", ")")

        def values(key: str, name: str = name) -> list[Any]:
            cells = []
            for n in settings.users:
                r = _cell(rows, name, n, eps)
                if r is None or not r["feasible"]:
                    cells.append("infeasible")
                elif key == "ci":
                    cells.append(f"[{fmt(r['rmse_ci_low'])}, {fmt(r['rmse_ci_high'])}]")
                else:
                    cells.append(_num(r[key]))
            return cells

        table.append(
            [label, "messages / user", paper[1] if paper else "—", *values("messages_per_user")]
        )
        table.append(
            ["", "message size (bits)", paper[2] if paper else "—", *values("bits_per_message")]
        )
        table.append(["", "bytes / user", "—", *values("bytes_per_user")])
        table.append(
            [
                "",
                "expected error: measured RMSE",
                paper[3] if paper else "—",
                *values("measured_rmse"),
            ]
        )
        table.append(["", "  95% CI", "", *values("ci")])
        table.append(["", "  predicted RMSE", "", *values("predicted_rmse")])
        table.append(["", "  method", "", *values("method")])
    return markdown_table(headers, table)


def _findings(settings: CompareSettings, rows: Sequence[dict[str, Any]], eps: float) -> list[str]:
    """Sentences computed from the rows at ε = ``eps`` (nothing here is hard-coded)."""
    out: list[str] = []
    ref = [r for r in rows if r["epsilon"] == eps]

    # lowest error at each n
    for n in settings.users:
        ranked = sorted(
            (
                r
                for r in ref
                if r["users"] == n
                and r["feasible"]
                and r["measured_rmse"] is not None
                and r["protocol"] in SINGLE_USER_SHUFFLED
            ),
            key=lambda r: float(r["measured_rmse"]),
        )
        if not ranked:
            continue
        listing = ", ".join(f"{r['protocol']} {fmt(r['measured_rmse'])}" for r in ranked)
        extra = []
        central = _cell(rows, "central", n, eps)
        if central and central["feasible"] and central["measured_rmse"] is not None:
            extra.append(f"the trusted curator (central) measured {fmt(central['measured_rmse'])}")
        sp = _cell(rows, "cloak-sum-preserving", n, eps)
        if sp and sp["feasible"] and sp["measured_rmse"] is not None:
            extra.append(
                f"the sum-preserving cloak (a weaker neighbouring notion) "
                f"{fmt(sp['measured_rmse'])}"
            )
        out.append(
            f"At n = {_n_label(n)} the lowest measured RMSE among the shuffled-model protocols "
            f"protecting single-user changes is {ranked[0]['protocol']}'s "
            f"{fmt(ranked[0]['measured_rmse'])} (ranking: {listing})"
            + (f"; for reference, {' and '.join(extra)}." if extra else ".")
        )

    # bbgn vs central
    ratios, predicted = [], []
    for n in settings.users:
        b, c = _cell(rows, "bbgn", n, eps), _cell(rows, "central", n, eps)
        if (
            b
            and c
            and b["feasible"]
            and c["feasible"]
            and b["measured_rmse"]
            and c["measured_rmse"]
        ):
            ratios.append((n, float(b["measured_rmse"]) / float(c["measured_rmse"])))
            predicted.append(float(b["predicted_rmse"]) / float(c["predicted_rmse"]))
    if ratios:
        low = min(ratios, key=lambda t: t[1])
        high = max(ratios, key=lambda t: t[1])
        out.append(
            f"bbgn's measured RMSE is {fmt(low[1])}× (n = {_n_label(low[0])}) to "
            f"{fmt(high[1])}× (n = {_n_label(high[0])}) that of the central discrete Laplace; "
            f"the predicted ratio is {_span(predicted)}, so the "
            "difference is within sampling noise when the 95% intervals overlap "
            + (
                "(they do at every n)."
                if all(
                    _overlap(_cell(rows, "bbgn", n, eps), _cell(rows, "central", n, eps))
                    for n, _ in ratios
                )
                else "(they do not at every n: see the full table)."
            )
        )

    # the blanket's growth
    blanket = _feasible(list(ref), protocol="blanket")
    infeasible = [r for r in ref if r["protocol"] == "blanket" and not r["feasible"]]
    if blanket:
        slope = _slope([(r["users"], r["measured_rmse"]) for r in blanket if r["measured_rmse"]])
        pslope = _slope([(r["users"], r["predicted_rmse"]) for r in blanket])
        text = (
            f"The privacy blanket is feasible from n = {_n_label(blanket[0]['users'])}"
            + (
                f" (infeasible at n = {', '.join(_n_label(r['users']) for r in infeasible)}: "
                f"{_short_reason(infeasible[0]['reason'])})"
                if infeasible
                else ""
            )
            + f"; its measured RMSE goes from {fmt(blanket[0]['measured_rmse'])} to "
            f"{fmt(blanket[-1]['measured_rmse'])} between n = {_n_label(blanket[0]['users'])} "
            f"and n = {_n_label(blanket[-1]['users'])}"
        )
        if slope is not None and pslope is not None:
            text += (
                f", a log-log slope of {slope:.3f} (predicted {pslope:.3f}; Figure 1's "
                f"n^(1/6) is {1 / 6:.3f})"
            )
        ks = [r["precision"] for r in blanket]
        text += f"; its precision k is {', '.join(str(k) for k in ks)} at these n."
        out.append(text)

    # cheu's communication
    cheu = _feasible(list(ref), protocol="cheu")
    if len(cheu) >= 2:
        slope = _slope([(r["users"], r["messages_per_user"]) for r in cheu])
        equal = [r for r in cheu if r["precision"] == r["messages_per_user"]]
        out.append(
            f"Cheu et al. send {fmt(_num(cheu[0]['messages_per_user']))} one-bit messages per "
            f"user at n = {_n_label(cheu[0]['users'])} and "
            f"{fmt(_num(cheu[-1]['messages_per_user']))} at "
            f"n = {_n_label(cheu[-1]['users'])} (log-log slope {fmt(slope)}; Figure 1: ε√n, "
            f"slope 0.5)"
            + (
                f"; r equals the ε√n levels k from n = {_n_label(equal[0]['users'])} on, while "
                "at smaller n more bits than levels are sent to keep the replacement "
                "probability <= 1/2."
                if equal and equal[0] is not cheu[0]
                else "."
            )
            + f" Their error goes from {fmt(cheu[0]['measured_rmse'])} to "
            f"{fmt(cheu[-1]['measured_rmse'])}."
        )

    # the cloak's communication and error
    cloak = _feasible(list(ref), protocol="cloak-single-user")
    if cloak:
        first, last = cloak[0], cloak[-1]
        decades = math.log10(last["users"] / first["users"]) if last is not first else 0.0
        formula = math.sqrt(math.log(1.0 / settings.delta)) / eps
        text = (
            f"The single-user cloak sends {fmt(_num(first['messages_per_user']))} messages of "
            f"{first['bits_per_message']} bits at n = {_n_label(first['users'])}"
        )
        if decades > 0:
            growth = (last["messages_per_user"] - first["messages_per_user"]) / decades
            text += (
                f" and {fmt(_num(last['messages_per_user']))} of "
                f"{last['bits_per_message']} bits at "
                f"n = {_n_label(last['users'])}: {growth:+.1f} messages per decade of n "
                "(Figure 1: log(n/(εδ)) messages, i.e. a constant increase per decade)"
            )
        errors = [r["measured_rmse"] for r in cloak if r["measured_rmse"] is not None]
        if errors:
            text += (
                f". Its measured RMSE ranges over {fmt(min(errors))}–{fmt(max(errors))}, "
                f"against Figure 1's (1/ε)√log(1/δ) = {fmt(formula)} without constants (a "
                f"factor {fmt(min(errors) / formula)}–{fmt(max(errors) / formula)})"
            )
            if any(b < a for a, b in itertools.pairwise(errors)):
                text += (
                    "; the error is not monotone in n: the planner minimises bits per user "
                    "first and the error only among the cheapest plans"
                )
        out.append(text + ".")

    sp_rows = _feasible(list(ref), protocol="cloak-sum-preserving")
    if sp_rows:
        exact = all(
            r["measured_rmse"] is not None
            and math.isclose(r["measured_rmse"], abs(r["predicted_bias"]), rel_tol=1e-9)
            for r in sp_rows
        )
        out.append(
            f"The sum-preserving cloak's RMSE ({fmt(min(r['measured_rmse'] for r in sp_rows))}–"
            f"{fmt(max(r['measured_rmse'] for r in sp_rows))}) "
            + (
                "is exactly its deterministic rounding bias Σ frac(x_i·k)/k in every row"
                if exact
                else "differs from its deterministic rounding bias in some row (see the table)"
            )
            + "; n/(2k) (uniform fractional parts) is "
            + ", ".join(
                f"{fmt(r['users'] / (2 * r['precision']))} at n = {_n_label(r['users'])}"
                for r in sp_rows
                if r["precision"]
            )
            + f". Figure 1's 2^(−m) with m = {fmt(_num(sp_rows[0]['messages_per_user']))}–"
            f"{fmt(_num(sp_rows[-1]['messages_per_user']))} would be "
            f"{fmt(2.0 ** -sp_rows[0]['messages_per_user'])} or less"
            + (": the precision k alone sets this protocol's error." if exact else ".")
        )

    # communication at the largest n
    largest = max(settings.users)
    comm = sorted(
        (r for r in ref if r["users"] == largest and r["feasible"]),
        key=lambda r: float(r["bytes_per_user"]),
    )
    if comm:
        out.append(
            f"Communication at n = {_n_label(largest)}: "
            + ", ".join(
                f"{r['protocol']} {fmt(_num(r['bytes_per_user']))} B/user "
                f"({fmt(_num(r['messages_per_user']))} × {r['bits_per_message']} bits)"
                for r in comm
            )
            + "."
        )
    return out


def _span(values: Sequence[float]) -> str:
    """ "a–b", or "a" when both ends print the same."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def _short_reason(reason: object, limit: int = 110) -> str:
    text = str(reason or "no reason given").replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _overlap(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if not a or not b or a["rmse_ci_low"] is None or b["rmse_ci_low"] is None:
        return False
    return bool(a["rmse_ci_low"] <= b["rmse_ci_high"] and b["rmse_ci_low"] <= a["rmse_ci_high"])


def _agreement(rows: Sequence[dict[str, Any]]) -> str:
    measured = [r for r in rows if r["feasible"] and r["measured_rmse"] is not None]
    if not measured:
        return "No feasible cell was measured."
    inside = [
        r
        for r in measured
        if r["rmse_ci_low"] - 1e-12 <= r["predicted_rmse"] <= r["rmse_ci_high"] + 1e-12
    ]
    outside = [r for r in measured if r not in inside]
    ratios = [
        float(r["measured_over_predicted"])
        for r in measured
        if r["measured_over_predicted"] is not None
    ]
    text = (
        f"The prediction lies inside the measured 95% interval in {len(inside)} of "
        f"{len(measured)} cells; measured/predicted RMSE ranges over "
        f"{fmt(min(ratios))}–{fmt(max(ratios))}."
    )
    if outside:
        listing = "; ".join(
            f"{r['protocol']} n = {_n_label(r['users'])} ε = {r['epsilon']:g} "
            f"(measured {fmt(r['measured_rmse'])}, predicted {fmt(r['predicted_rmse'])})"
            for r in outside
        )
        expected = 0.05 * len(measured)
        text += (
            f" Outside: {listing}. With nominal 95% intervals about {expected:.1f} of "
            f"{len(measured)} cells would fall outside by chance alone (somewhat more for the "
            "heavy-tailed Laplace-like errors, whose intervals are approximate)."
        )
    return text


def _methods(rows: Sequence[dict[str, Any]]) -> str:
    fast = [r for r in rows if r["method"] == "sufficient-statistic"]
    if not fast:
        return "Every cell was simulated message by message (encode → shuffle → analyze)."
    grouped: dict[str, dict[int, list[float]]] = {}
    for r in fast:
        grouped.setdefault(r["protocol"], {}).setdefault(r["users"], []).append(r["epsilon"])
    listing = "; ".join(
        f"{name} at "
        + ", ".join(
            f"n = {_n_label(n)} (ε = {', '.join(f'{e:g}' for e in sorted(eps))})"
            for n, eps in sorted(by_n.items())
        )
        for name, by_n in grouped.items()
    )
    return (
        "Cells simulated with the exact sufficient-statistic sampler (n·m above the "
        f"per-trial message limit): {listing}. Every other feasible cell ran the real "
        "encode → shuffle → analyze pipeline."
    )


def _report(settings: CompareSettings, rows: Sequence[dict[str, Any]], seconds: float) -> str:
    eps = _reference_epsilon(settings)
    quick = " --quick" if settings.quick else ""
    trials = sum(int(r["trials"] or 0) for r in rows)
    figure_note = (
        ""
        if eps == FIGURE_EPSILON and settings.delta == FIGURE_DELTA
        else f" (the paper's setting ε = 1, δ = 10^-6 is not in this grid; closest: "
        f"ε = {eps:g}, δ = {settings.delta:g})"
    )
    full = markdown_table(
        [
            "protocol",
            "n",
            "ε",
            "method",
            "m",
            "bits",
            "B/user",
            "k",
            "predicted",
            "generic",
            "measured",
            "95% CI",
            "mean error",
            "trials",
            "s",
            "note",
        ],
        [
            [
                r["protocol"],
                r["users"],
                r["epsilon"],
                r["method"] or "—",
                _num(r["messages_per_user"]),
                r["bits_per_message"],
                _num(r["bytes_per_user"]),
                r["precision"],
                r["predicted_rmse"],
                r["predicted_rmse_generic"],
                r["measured_rmse"],
                f"[{fmt(r['rmse_ci_low'])}, {fmt(r['rmse_ci_high'])}]" if r["feasible"] else "—",
                r["mean_error"],
                r["trials"],
                r["seconds"],
                _short_reason(r["reason"]) if r["reason"] else "",
            ]
            for r in rows
        ],
    )
    findings = "\n".join(f"* {s}" for s in _findings(settings, rows, eps))
    text = [
        "# Figure 1, measured: summation protocols in the shuffled model\n",
        f"Generated by `cloaknet experiment compare{quick} --trials {settings.trials}` in "
        f"{seconds:.1f} s ({trials} rounds in {settings.jobs} processes"
        f"{'' if settings.seed is None else f', seed {settings.seed}'}"
        f"{'; protocol randomness from the OS CSPRNG' if settings.seed is None else ''}). "
        f"Grid: n ∈ {{{', '.join(_n_label(n) for n in settings.users)}}}, "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in settings.epsilons)}}}, "
        f"δ = {_delta_label(settings.delta)}; "
        f"protocols: {', '.join(settings.protocols)}.\n",
        "Each cell fixes one input vector x ∈ [0, 1)^n (drawn once per n from a seeded numpy "
        "generator: this is the *data*, identical for every protocol and ε; protocol "
        "randomness comes only from cloaknet's random sources) and measures the error "
        "estimate − Σx over the rounds. Message sizes are the wire format's fixed widths.\n",
        f"## Figure 1 reproduced (ε = {eps:g}, δ = {_delta_label(settings.delta)}){figure_note}\n",
        "The paper's column is its asymptotic formula (constants suppressed, as in the "
        "paper); the other columns are measured. Figure 1's second line for Cheu et al. "
        "(m messages, error √n/m + (1/ε)·log(1/δ)) is the variant with a free number of "
        "messages; this implementation sends r >= ⌈ε√n⌉ bits, the first line. The central "
        "curator and bbgn (split-and-mix with distributed discrete Laplace noise) are not in "
        "Figure 1 and serve as references. Figure 1 gives the new protocol two lines, next "
        "to its two privacy notions (single-user change, sum-preserving change); they are "
        "paired here with cloak-single-user and cloak-sum-preserving.\n",
        _figure_table(settings, rows, eps),
        "\n## What the numbers say\n",
        findings + "\n",
        "* " + _agreement(rows) + "\n",
        "* " + _methods(rows) + "\n",
        "\n## Error vs n\n",
        "![error vs users](error_vs_users.png)\n",
        "\n## Communication vs n\n",
        "![communication vs users](communication_vs_users.png)\n",
        "\n## How to read the predictions\n",
        "* `predicted` is `predicted_rmse_for(x)` on the fixed inputs: exact for blanket, "
        "cheu, central and bbgn (rounding variance plus noise; bbgn ignores decoding failures "
        "of probability <= 2^-40); for the cloak it combines the exact bias −Σ frac(x_i k)/k "
        "with the exact noise variance, ignoring the clamps of Algorithm 2.\n"
        "* `generic` is `predicted_rmse()`: an upper bound over all inputs for blanket, cheu, "
        "central and bbgn, but for the cloak the **planner's model** (uniform fractional "
        "parts, Lemma 8's variance bound), not a worst case.\n"
        "* The 95% interval treats ν·MSE/σ² as χ²_ν with Satterthwaite's effective degrees "
        "of freedom ν = 2t/(κ − 1) from the sample kurtosis κ = t·Σe⁴/(Σe²)², clamped to "
        "[1, t]: the exact χ² interval for Gaussian errors, wider for heavy tails (the "
        "discrete Laplace noise of central and bbgn has κ ≈ 6; the single-user cloak's noise "
        "is a sum of a few Laplace draws). It remains approximate for non-Gaussian errors "
        "(about 90% coverage for Laplace errors at 50 trials); a deterministic error (the "
        "sum-preserving cloak) gets the point interval.\n"
        "* `sufficient-statistic` cells draw the exact distribution of the sum the analyzer "
        "uses (the cloak: Σ floor(x k) plus the pre-randomizer noise, mod N; bbgn: randomized "
        "rounding plus Pólya noise, mod q; cheu: kept and flipped bits by exact binomials) "
        "and run the protocol's own analyzer on it; see `cloaknet/experiments/compare.py`.\n",
        "\n## Full table\n",
        full,
        "\n## Files\n\n`compare.csv` (the table above, unrounded), `trials.csv` (every round), "
        "`error_vs_users.png`, `communication_vs_users.png`, `settings.json`.\n",
    ]
    return "\n".join(text)
