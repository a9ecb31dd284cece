"""The adversary of the collusion lemmas, made concrete: exact posteriors over one honest input.

This module computes what an analyzer that colludes with some users can actually learn about
one honest user's input from a single round of the invisibility cloak (Ghazi, Pagh and
Velingker 2019). Lemma numbers follow the compiled paper as tabulated in
:mod:`cloaknet.accounting` (Lemma 1 ``lemma:gamma_smooth``, Lemma 2
``lemma:two_player_set_probability``, Lemma 3 ``lemma:pair_pointwise_DP``, Lemma 4
``lemma:swap_dp``, Lemma 10 ``lemma:classical_pointwise_DP``, Lemma 11
``lemma:subset_DP_single_user_changes``, Lemmas 12/13 ``lemma:resilient_privacy_*``).

Model (the worst case the lemmas reduce to)
-------------------------------------------
Lemmas 12 and 13 condition on the colluders' messages and, through Lemma 4, on every other
user's encoding, leaving *two* honest users whose 2m shares are all the adversary does not
know. Here the adversary

* sees the shuffled multiset of every share of the round (:attr:`Trial.view`);
* knows each colluder's input and exactly the messages it sent, and removes them by multiset
  difference (:func:`remove_messages`), leaving the honest residual E of 2m shares;
* knows the honest pair's rounded total x̄1 + x̄2 (sum-preserving changes), or the other honest
  user's input x̄2 exactly (single-user changes).

For the multiset E let B_x be the number of size-m index subsets S of {1..2m} with
Σ_{i∈S} E_i ≡ x (mod N) (the B_{y*,x} of Lemma 3's proof). By Lemma 2 and the proof of
Lemma 3, with x̄ = floor(x·k),

    P[E | x̄1, x̄2] = (m!)² / (N^{2(m-1)} · Π_v mult_E(v)!) · B_{x̄1} · 1[ΣE ≡ x̄1 + x̄2 (mod N)].

The paper states this for distinct elements (where Π mult! = 1); counting index permutations
instead of value tuples shows it holds for every multiset, and the factor 1/Π mult! does not
depend on the inputs, so it cancels from every likelihood ratio and posterior here.

In single-user mode user i first adds b_i·w_i with b_i ~ Bernoulli(q), w_i ~ D_{N,p}
(Section 2.4). Since D_{N,p} is supported on a full residue system, summing over the encoded
values gives (Lemma 10's proof, averaged over both noises)

    P[E | x̄1, x̄2, b1, b2] ∝ Σ_{t ∈ Z_N} B_t · f1(t − x̄1) · f2(s − t − x̄2),    s = ΣE mod N,

with f_i(d) = D_{N,p}[d centred into {−(N−1)/2..(N−1)/2}] if b_i = 1 and f_i(d) = 1[d ≡ 0]
if b_i = 0. **The adversary here is told b1 and b2**, which is stronger than the adversary of
Lemmas 11 and 13 (there the b's are hidden and the e^{-q(n-|C|)} term pays for all of them
being 0); its privacy loss is therefore an upper bound on the lemma's adversary's loss for the
same view.

The γ of Definition 2 realised by a view is :func:`realized_gamma`; Lemmas 3 and 10 bound the
pointwise privacy loss of a γ-smooth, distinct view by ln((1+γ)/(1−γ)) (plus k·ln(1/p) in the
single-user case), and :class:`Posterior` gives the actual loss to compare against.

The parts: subset-sum counts and view statistics in :mod:`cloaknet.adversary_views`, the
posteriors in :mod:`cloaknet.adversary_posterior` (both re-exported here), and here the
colluders, the round simulator and the analysis of one simulated round.

All functions raise :class:`~cloaknet.errors.ParameterError` on bad arguments. Randomness in
the simulator comes only from the :class:`~cloaknet.randomness.RandomSource` passed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from cloaknet.adversary_posterior import (
    Posterior,
    posterior_single_user,
    posterior_sum_preserving,
)
from cloaknet.adversary_views import (
    ViewStats,
    as_int,
    is_gamma_smooth,
    realized_gamma,
    share_list,
    subset_sum_counts,
    view_stats,
)
from cloaknet.encoding import split
from cloaknet.errors import ParameterError
from cloaknet.noise import sample_truncated_laplace, truncated_laplace_pmf
from cloaknet.randomness import RandomSource, bernoulli_fraction
from cloaknet.validation import check_int

__all__ = [
    "BEHAVIOURS",
    "Analysis",
    "Behaviour",
    "Mode",
    "Posterior",
    "Trial",
    "ViewStats",
    "analyze_trial",
    "colluder_messages",
    "is_gamma_smooth",
    "posterior_single_user",
    "posterior_sum_preserving",
    "realized_gamma",
    "remove_messages",
    "simulate_trial",
    "subset_sum_counts",
    "view_stats",
]

Behaviour = Literal["honest", "zeros", "reuse", "collide"]
#: Every colluder behaviour understood by :func:`colluder_messages`.
BEHAVIOURS: tuple[Behaviour, ...] = ("honest", "zeros", "reuse", "collide")

Mode = Literal["sum-preserving", "single-user"]
_MODES: tuple[Mode, ...] = ("sum-preserving", "single-user")


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_mode(mode: object) -> Mode:
    for known in _MODES:
        if mode == known:
            return known
    raise ParameterError(f"mode must be one of {_MODES}, got {mode!r}")


def _check_behaviour(behaviour: object) -> Behaviour:
    for known in BEHAVIOURS:
        if behaviour == known:
            return known
    raise ParameterError(f"behaviour must be one of {BEHAVIOURS}, got {behaviour!r}")


def _check_fraction(name: str, value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise ParameterError(f"{name} must be a fractions.Fraction or int, got {value!r}")
    return Fraction(value)


# --------------------------------------------------------------------------------------------
# Colluders and the round simulator
# --------------------------------------------------------------------------------------------


def colluder_messages(
    behaviour: Behaviour,
    inputs: Sequence[int],
    m: int,
    modulus: int,
    rng: RandomSource,
    *,
    honest_shares_hint: Sequence[int] | None = None,
) -> list[list[int]]:
    """The m messages each colluder sends (and later reveals to the analyzer), one list each.

    * ``"honest"``: each colluder encodes its own x̄ with Algorithm 1 (:func:`split`).
    * ``"zeros"``: every colluder sends m zeros.
    * ``"reuse"``: colluder 0 encodes honestly, every other colluder resends its messages.
    * ``"collide"``: every share is drawn uniformly from ``honest_shares_hint`` when given (a
      model of colluders that duplicate honest shares, e.g. through a compromised client
      library), else uniformly from Z_N.

    Lemmas 12 and 13 (via Lemma 4) condition on the colluders' messages, so they cover every
    behaviour whose messages are independent of the honest users' randomness and revealed —
    all of the above except ``"collide"`` with a hint, which is outside that assumption. Since
    colluders reveal exactly what they sent, the analyzer's multiset difference always leaves
    exactly the honest shares (:func:`remove_messages`): a revealed deviation can change the
    total, never the honest residual multiset.

    :param inputs: the colluders' rounded inputs x̄ (one per colluder; ignored by "zeros" and
        "collide", only inputs[0] used by "reuse").
    :param m: messages per user, >= 1; ``modulus``: N >= 2.
    :raises ParameterError: unknown behaviour, bad m / N, or a hint value outside [0, N) or an
        empty hint.
    """
    behaviour = _check_behaviour(behaviour)
    m = check_int("m", m, 1)
    modulus = check_int("modulus", modulus, 2)
    xs = [as_int(f"inputs[{i}]", x) for i, x in enumerate(inputs)]
    if behaviour == "honest":
        return [split(x, m, modulus, rng) for x in xs]
    if behaviour == "zeros":
        return [[0] * m for _ in xs]
    if behaviour == "reuse":
        if not xs:
            return []
        first = split(xs[0], m, modulus, rng)
        return [list(first) for _ in xs]
    if honest_shares_hint is None:
        return [[rng.randbelow(modulus) for _ in range(m)] for _ in xs]
    hint = share_list(honest_shares_hint, modulus, "honest_shares_hint")
    if not hint:
        raise ParameterError("honest_shares_hint must not be empty")
    return [[hint[rng.randbelow(len(hint))] for _ in range(m)] for _ in xs]


def remove_messages(view: Sequence[int], revealed: Sequence[Sequence[int]]) -> list[int]:
    """Multiset difference: ``view`` minus every share of every revealed message list.

    The result keeps the view's order (for each value the first occurrences are removed).

    :raises ParameterError: a revealed share does not occur in the view often enough.
    """
    pending = Counter(int(y) for message in revealed for y in message)
    available = Counter(int(y) for y in view)
    for value, needed in pending.items():
        if available[value] < needed:
            raise ParameterError(
                f"revealed share {value} occurs {needed} times but only "
                f"{available[value]} times in the view"
            )
    residual: list[int] = []
    for y in view:
        value = int(y)
        if pending[value] > 0:
            pending[value] -= 1
        else:
            residual.append(value)
    return residual


@dataclass(frozen=True)
class Trial:
    """One simulated round as the colluding analyzer sees it, plus the ground truth.

    ``view`` is the shuffled multiset of all shares (honest and colluders');
    ``honest_shares`` the target's m shares followed by the other honest user's m shares;
    inputs are rounded values x̄ in 0..k; noises are the w added before encoding (0 when the
    user is not noisy, and always 0 in sum-preserving mode).
    """

    view: list[int]
    honest_shares: list[int]
    colluder_messages: list[list[int]]
    target_input: int
    other_input: int
    colluder_inputs: list[int]
    target_noise: int
    other_noise: int
    target_noisy: bool
    other_noisy: bool


def _shuffle(values: list[int], rng: RandomSource) -> None:
    """Uniform in-place permutation (Fisher–Yates with exact ``randbelow``)."""
    for i in range(len(values) - 1, 0, -1):
        j = rng.randbelow(i + 1)
        values[i], values[j] = values[j], values[i]


def simulate_trial(
    *,
    m: int,
    modulus: int,
    precision: int,
    colluders: int,
    behaviour: Behaviour,
    mode: Mode,
    rng: RandomSource,
    noise_scale: Fraction | None = None,
    q: Fraction | None = None,
    target_input: int | None = None,
    other_input: int | None = None,
    target_noisy: bool | None = None,
    other_noisy: bool | None = None,
) -> Trial:
    """Simulate one round with two honest users and ``colluders`` colluding users.

    Order of draws from ``rng`` (fixed, so a seeded :class:`DeterministicRandom` replays a
    trial exactly): target and other inputs (uniform in 0..k unless given), the colluders'
    inputs, then per honest user (target first) the noise indicator b ~ Bernoulli(q) (exact)
    and w ~ D_{N,p} with p = exp(−1/noise_scale) (exact sampler) if b = 1 — single-user mode
    only — and its m shares (Algorithm 1 on x̄ + b·w), then the colluders' messages
    (:func:`colluder_messages`; "collide" gets the honest shares as its hint), then a uniform
    shuffle of all (2 + colluders)·m shares.

    :param m: messages per user, >= 1 (m < 4 is allowed for experiments).
    :param modulus: N >= 2; odd and >= 3 in single-user mode.
    :param precision: k >= 1.
    :param colluders: number of colluding users, >= 0.
    :param noise_scale: positive Fraction / int; required in single-user mode, must be None
        in sum-preserving mode (likewise ``q``, a Fraction / int in [0, 1]).
    :param target_input: x̄1 in 0..k, or None for uniform; ``other_input`` likewise.
    :param target_noisy: single-user mode: force the target's noise indicator b instead of
        drawing it with probability q (experiments that pick a noisy partner, as the proof of
        Lemma 11 does, decide the indicators themselves); ``other_noisy`` likewise.
    :raises ParameterError: any parameter out of range or inconsistent with ``mode``.
    """
    m = check_int("m", m, 1)
    modulus = check_int("modulus", modulus, 2)
    precision = check_int("precision", precision, 1)
    colluders = check_int("colluders", colluders, 0)
    behaviour = _check_behaviour(behaviour)
    mode = _check_mode(mode)
    noisy_mode = mode == "single-user"
    q_value = Fraction(0)
    if noisy_mode:
        if noise_scale is None or q is None:
            raise ParameterError("single-user mode needs noise_scale and q")
        scale = _check_fraction("noise_scale", noise_scale)
        if scale <= 0:
            raise ParameterError(f"noise_scale must be > 0, got {scale}")
        q_value = _check_fraction("q", q)
        if not 0 <= q_value <= 1:
            raise ParameterError(f"q must lie in [0, 1], got {q_value}")
        truncated_laplace_pmf(0, modulus, 0.5)  # validates odd N >= 3
    elif noise_scale is not None or q is not None:
        raise ParameterError("noise_scale and q apply only to single-user mode")

    def pick(name: str, given: int | None) -> int:
        if given is None:
            return rng.randbelow(precision + 1)
        value = as_int(name, given)
        if not 0 <= value <= precision:
            raise ParameterError(f"{name} must lie in 0..k = 0..{precision}, got {value}")
        return value

    x1 = pick("target_input", target_input)
    x2 = pick("other_input", other_input)
    colluder_inputs = [rng.randbelow(precision + 1) for _ in range(colluders)]

    if not noisy_mode and (target_noisy or other_noisy):
        raise ParameterError("noise indicators apply only to single-user mode")

    def noise(forced: bool | None) -> tuple[bool, int]:
        if not noisy_mode:
            return False, 0
        if forced is None:
            forced = bernoulli_fraction(q_value.numerator, q_value.denominator, rng)
        if not forced:
            return False, 0
        assert noise_scale is not None
        return True, sample_truncated_laplace(modulus, noise_scale, rng)

    noisy1, w1 = noise(target_noisy)
    shares1 = split(x1 + w1, m, modulus, rng)
    noisy2, w2 = noise(other_noisy)
    shares2 = split(x2 + w2, m, modulus, rng)
    honest = shares1 + shares2
    messages = colluder_messages(
        behaviour,
        colluder_inputs,
        m,
        modulus,
        rng,
        honest_shares_hint=honest if behaviour == "collide" else None,
    )
    view = honest + [y for message in messages for y in message]
    _shuffle(view, rng)
    return Trial(
        view=view,
        honest_shares=honest,
        colluder_messages=messages,
        target_input=x1,
        other_input=x2,
        colluder_inputs=colluder_inputs,
        target_noise=w1,
        other_noise=w2,
        target_noisy=noisy1,
        other_noisy=noisy2,
    )


# --------------------------------------------------------------------------------------------
# The adversary's analysis of one trial
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Analysis:
    """What the colluding analyzer learns about the target from one :class:`Trial`.

    ``gamma``/``distinct``: :class:`ViewStats` of the honest residual (Definition 2, Lemma 1).
    ``privacy_loss``: :meth:`Posterior.privacy_loss` (nats; compare with ln((1+γ)/(1−γ)) of
    Lemma 3, plus k·ln(1/p) under Lemma 10). ``neighbour_loss``: |ln P[E|x̄1]/P[E|a]| for the
    true x̄1 and the feasible a farthest from it (the smaller such a on ties). ``guess_correct``:
    the MAP guess equals the true x̄1. ``prior_success``: success probability of the best guess
    under the (uniform) prior alone, 1/|support|. ``posterior_target``: posterior probability of
    the true x̄1.
    """

    gamma: float
    distinct: bool
    privacy_loss: float
    neighbour_loss: float
    guess_correct: bool
    prior_success: float
    posterior_target: float


def analyze_trial(
    trial: Trial,
    *,
    m: int,
    modulus: int,
    precision: int,
    mode: Mode,
    noise_p: float | None = None,
) -> Analysis:
    """Run the colluding analyzer on one trial with a uniform prior.

    Removes the colluders' revealed messages from the view, checks that exactly the honest
    shares remain, computes B once, then the view's :class:`ViewStats` and the posterior:
    :func:`posterior_sum_preserving` with total = x̄1 + x̄2 in sum-preserving mode,
    :func:`posterior_single_user` with x̄2 and both noise indicators known in single-user mode.

    :param noise_p: p of D_{N,p}; required in single-user mode.
    :raises ParameterError: ``mode`` or ``noise_p`` inconsistent with the trial, or a residual
        that is not the honest shares (a malformed trial).
    """
    mode = _check_mode(mode)
    m = check_int("m", m, 1)
    modulus = check_int("modulus", modulus, 2)
    if len(trial.honest_shares) != 2 * m:
        raise ParameterError(
            f"trial has {len(trial.honest_shares)} honest shares, expected 2m = {2 * m}"
        )
    residual = remove_messages(trial.view, trial.colluder_messages)
    if Counter(residual) != Counter(trial.honest_shares):
        raise ParameterError("the view minus the colluders' messages is not the honest shares")
    counts = subset_sum_counts(residual, m, modulus)
    stats = view_stats(residual, m, modulus, counts=counts)
    if mode == "sum-preserving":
        if trial.target_noisy or trial.other_noisy:
            raise ParameterError("a trial with noise cannot be analysed in sum-preserving mode")
        posterior = posterior_sum_preserving(
            residual,
            m,
            modulus,
            precision,
            trial.target_input + trial.other_input,
            counts=counts,
        )
    else:
        if noise_p is None:
            raise ParameterError("single-user mode needs noise_p")
        posterior = posterior_single_user(
            residual,
            m,
            modulus,
            precision,
            other_input=trial.other_input,
            noise_p=noise_p,
            target_noisy=trial.target_noisy,
            other_noisy=trial.other_noisy,
            counts=counts,
        )
    support = posterior.support
    target = trial.target_input
    target_index = int(np.searchsorted(support, target))
    alternative = int(support[int(np.argmax(np.abs(support - target)))])
    return Analysis(
        gamma=stats.gamma,
        distinct=stats.distinct,
        privacy_loss=posterior.privacy_loss(),
        neighbour_loss=abs(posterior.loss_between(target, alternative)),
        guess_correct=posterior.map_guess == target,
        prior_success=1.0 / len(support),
        posterior_target=float(posterior.probabilities[target_index]),
    )
