"""The lemmas' (ε, δ) at the experiment's parameters, for comparison with the attacks."""

from __future__ import annotations

import math
from fractions import Fraction

from cloaknet import accounting
from cloaknet.accounting import PrivacyBound
from cloaknet.errors import ParameterError
from cloaknet.experiments.collusion.settings import CollusionSettings
from cloaknet.noise import noise_p as scale_to_p

__all__ = [
    "gamma_for_swap_epsilon",
    "no_noise_share",
    "noise_guess_ceiling",
    "single_user_bound",
    "swap_bound",
]


def gamma_for_swap_epsilon(epsilon: float) -> float:
    """The γ whose swap loss ln((1+γ)/(1−γ)) equals ``epsilon`` (> 0): tanh(ε/2)."""
    return math.tanh(epsilon / 2)


def swap_bound(m: int, modulus: int, epsilon: float) -> PrivacyBound | None:
    """(ε, δ) of Lemma 5 (one sum-preserving swap) with γ spending all of ``epsilon``; None
    where the lemma does not apply (the accountant raises ParameterError)."""
    gamma = gamma_for_swap_epsilon(epsilon)
    try:
        return accounting.sum_preserving_bound(m, modulus, gamma, 1, lemma="Lemma 5")
    except ParameterError:
        return None


def single_user_bound(
    settings: CollusionSettings,
    m: int,
    modulus: int,
    users: int,
    colluders: int,
    q: Fraction,
    epsilon: float,
) -> PrivacyBound | None:
    """(ε, δ) of Lemma 11/13 with γ taking what ``epsilon`` leaves after the noise terms
    (k·ln(1/p) and the tail −ln(1 − e^(−q·h)) for h honest users); None when nothing is
    left for γ, when |C| exceeds the lemma's 0.9·n, or when the accountant rejects the
    parameters."""
    p = scale_to_p(settings.noise_scale)
    honest = users - colluders
    eps_noise = settings.precision * -math.log(p)
    eps_tail = -math.log(-math.expm1(-float(q) * honest))
    room = epsilon - eps_noise - eps_tail
    if room <= 0 or colluders > accounting.MAX_COLLUDER_FRACTION * users:
        return None
    gamma = gamma_for_swap_epsilon(room)
    try:
        return accounting.single_user_bound(
            m, modulus, gamma, settings.precision, p, float(q), users, colluders
        )
    except ParameterError:
        return None


def no_noise_share(q: Fraction, honest: int) -> float:
    """The probability (1 − q)^h that none of ``honest`` = h honest users adds noise in
    single-user mode (each does with probability ``q``): the rounds in which the sum, and with
    it the target's input, is exposed whatever the encoding."""
    return float((1 - q) ** honest)


def noise_guess_ceiling(settings: CollusionSettings) -> float:
    """The most often any guess of the target's input x̄ ∈ {0, …, k} can be right (uniform
    prior) in a single-user round where some honest user added noise and the view revealed
    nothing beyond the noisy sum: 1/(1 + k·e^(−ε₀)) = e^ε₀/(e^ε₀ + k), ε₀ = k·ln(1/p).

    Proof: D_{N,p} is log-Lipschitz (Lemma 7: neighbouring values' masses differ by at most a
    factor 1/p), and so is a sum of such noises; the likelihoods of two candidate inputs
    therefore differ by at most p^(−k) = e^ε₀, so the largest posterior is at most
    e^ε₀/(e^ε₀ + k·1)."""
    k = settings.precision
    eps0 = float(Fraction(k) / settings.noise_scale)
    return 1.0 / (1.0 + k * math.exp(-eps0))
