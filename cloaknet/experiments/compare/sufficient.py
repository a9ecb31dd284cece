"""Exact sufficient-statistic samplers: one round's estimate without the n·m messages.

Each of these analyzers depends on the shuffled messages only through one sum, so a trial can
draw that sum's distribution directly — exactly, not approximately — and run the protocol's
own analyzer on it:

* cloak (both modes): the analyzer is Algorithm 2 on Σ y mod N, and the encoder's rows sum to
  floor(x_i·k) + w_i mod N, so Σ y ≡ Σ floor(x_i·k) + Σ w_i (mod N). The noise w is drawn by
  the encoder's own :func:`cloaknet.pipeline.noise_many` and the analyzer is
  :func:`cloaknet.encoding.analyze_sum` (what :meth:`CloakProtocol.analyze` calls). Given the
  same random stream the estimate is *identical* to the messages path (the encoder draws the
  noise first).
* bbgn: Σ shares ≡ Σ x̄_i + Σ Z_i (mod q), with x̄ from
  :func:`cloaknet.protocols.base.randomized_round` and Z from :meth:`BBGNProtocol.noise_many`,
  drawn in the encoder's order; the protocol's own ``analyze`` then decodes a canonical
  multiset with that sum (one message equal to the residue, the others 0; 8·n·m bytes of
  memory). Again identical to the messages path given the same stream.
* cheu: the analyzer counts the ones C among the n·r bits. With S = Σ x̄_i unary ones
  (randomized rounding as in the encoder) and slots replaced independently with probability
  p by a uniform bit, a one becomes a zero, and a zero a one, each with probability exactly
  p/2 (the encoder's threshold is even), independently per slot; so
  C = S − Bin(S, p/2) + Bin(n·r − S, p/2) (the per-user kept/flipped counts, summed). The
  binomials are drawn exactly from uniform bits by
  :func:`cloaknet.experiments.samplers.binomial_dyadic`; the estimate is the analyzer's
  formula (C − p·n·r/2)/((1 − p)·k) with the exact rational p.

The test-suite checks that both methods agree in distribution (and exactly, stream for
stream, for the cloak and bbgn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.encoding import analyze_sum
from cloaknet.errors import ParameterError
from cloaknet.experiments.samplers import DIRECT_LIMIT, binomial_dyadic
from cloaknet.pipeline import noise_many
from cloaknet.protocols import BBGNProtocol, CheuProtocol, CloakProtocol, SummationProtocol
from cloaknet.protocols.base import randomized_round
from cloaknet.randomness import RandomSource
from cloaknet.vectorized import quantize, sum_mod

__all__ = ["FAST_PATH_PROTOCOLS", "SufficientStatisticSampler"]

#: Protocols with an exact sufficient-statistic sampler.
FAST_PATH_PROTOCOLS: Final[frozenset[str]] = frozenset(
    {"cloak-single-user", "cloak-sum-preserving", "cheu", "bbgn"}
)


@dataclass
class SufficientStatisticSampler:
    """Draws the analyzer's estimate of Σ ``x`` for one round of ``protocol`` from the exact
    distribution of its sufficient statistic (module doc). The deterministic parts (the
    cloak's Σ floor(x·k), bbgn's canonical message array) are computed once and reused
    across rounds, so one instance serves every trial of a cell.

    ``direct_limit`` is passed to the exact binomial sampler (cheu only).

    :raises ParameterError: ``protocol`` has no sufficient-statistic sampler (its name is
        not in :data:`FAST_PATH_PROTOCOLS`).
    """

    protocol: SummationProtocol
    x: NDArray[np.float64]
    direct_limit: int = DIRECT_LIMIT
    _floor_sum: int | None = field(default=None, init=False, repr=False)
    _canonical: NDArray[Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, CloakProtocol | BBGNProtocol | CheuProtocol):
            raise ParameterError(
                f"protocol {self.protocol.name!r} has no sufficient-statistic path"
            )

    def estimate(self, rng: RandomSource) -> float:
        """One round's estimate of Σ x (the units of x), drawing every random choice from
        ``rng``.

        :raises ParameterError: cheu with an odd replacement threshold or a non-dyadic
            replacement probability (the sampler's assumptions).
        """
        if isinstance(self.protocol, CloakProtocol):
            return self._cloak(self.protocol, rng)
        if isinstance(self.protocol, BBGNProtocol):
            return self._bbgn(self.protocol, rng)
        assert isinstance(self.protocol, CheuProtocol)
        return self._cheu(self.protocol, rng)

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
