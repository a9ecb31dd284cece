"""The typed results of the collusion experiment: one :class:`AttackRow` per attacked round,
one row type per summary table, and the :class:`Headline` claims. They become dicts only at
the CSV/JSON edge (:func:`cloaknet.experiments.output.row_dict`).

Losses are in nats (+inf when the adversary excluded a feasible input outright);
probabilities and fractions lie in [0, 1] (NaN for an empty group); a bound is None where no
lemma applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloaknet.adversary import Behaviour, Mode

__all__ = [
    "AttackRow",
    "BehaviourRow",
    "ColludersRow",
    "Headline",
    "MessagesRow",
    "NetworkedRow",
    "ProfilePoint",
    "SmoothnessRow",
]


@dataclass(frozen=True, kw_only=True)
class AttackRow:
    """One attacked round (a row of ``trials.csv``).

    ``sweep`` names the grid it belongs to; ``source`` is "simulated" or "networked"; the
    round had ``users`` users of whom ``colluders`` collude and ``honest`` do not. ``gamma``
    and ``distinct`` describe the honest residual view; ``privacy_loss`` is the realised
    pointwise loss, ``neighbour_loss`` the loss between the true input and the farthest
    feasible one; ``guess_correct`` whether the MAP guess was right, against the prior's
    ``prior_success``; ``posterior_target`` the posterior of the true input;
    ``target_noisy``/``other_noisy`` the noise indicators (single-user mode);
    ``sum_error`` the analyzer's error on the sum in units of the input. The networked
    rounds leave ``neighbour_loss`` and the last four None. The fields are keyword-only and
    in the column order of ``trials.csv``.
    """

    sweep: str
    source: str
    mode: Mode
    m: int
    modulus: int
    precision: int
    users: int
    colluders: int
    honest: int
    behaviour: Behaviour
    gamma: float
    distinct: bool
    privacy_loss: float
    neighbour_loss: float | None = None
    guess_correct: bool
    prior_success: float
    posterior_target: float | None = None
    target_noisy: bool | None = None
    other_noisy: bool | None = None
    sum_error: float | None = None


@dataclass(frozen=True)
class MessagesRow:
    """Privacy loss vs m (``loss_vs_m.csv``) for rounds with ``honest`` honest users:
    P[loss = ∞], the median loss, the 90th percentile of the finite losses (NaN when no loss
    was finite), the guessing success (``correct`` of ``trials`` rounds, with its 95% Wilson
    interval) against the prior's, and the share of distinct views.

    Single-user mode also splits the rounds by noise: ``quiet_rounds`` in which no honest
    user added noise, ``quiet_correct`` and ``quiet_infinite`` of them guessed right and with
    infinite loss, and ``noisy_correct`` of the other ``trials − quiet_rounds`` guessed
    right. Sum-preserving mode adds no noise: the four are None.
    """

    mode: Mode
    m: int
    honest: int
    trials: int
    p_infinite_loss: float
    median_loss: float
    p90_finite_loss: float
    correct: int
    guess_success: float
    guess_ci_low: float
    guess_ci_high: float
    prior_success: float
    p_distinct: float
    quiet_rounds: int | None = None
    quiet_correct: int | None = None
    quiet_infinite: int | None = None
    noisy_correct: int | None = None


@dataclass(frozen=True)
class ColludersRow:
    """Privacy loss vs |C| (``colluders.csv``); the Lemma 13 bound (ε = 2) and the empirical
    P[loss > bound ε] with its 95% Wilson interval where the lemma applies (None
    otherwise)."""

    mode: Mode
    colluders: int
    fraction: float
    honest: int
    trials: int
    p_infinite_loss: float
    median_loss: float
    bound_epsilon: float | None
    bound_delta: float | None
    empirical_delta: float | None
    empirical_delta_ci_high: float | None
    empirical_delta_ci_low: float | None
    guess_success: float


@dataclass(frozen=True)
class SmoothnessRow:
    """Lemma 1 at one (m, N, γ) (``smoothness.csv``): the empirical rate of views that are
    not γ-smooth or not distinct with its 95% Wilson interval, the rate of repeated shares,
    Lemma 1's η (NaN where the lemma does not apply) and its collision term 2m²/N."""

    m: int
    modulus: int
    gamma: float
    trials: int
    empirical_failure: float
    ci_low: float
    ci_high: float
    p_not_distinct: float
    eta_bound: float
    collision_term: float


@dataclass(frozen=True)
class ProfilePoint:
    """One point of the privacy profile (``privacy_profile.csv``): the empirical
    P[loss > ε] (``over`` of ``trials`` rounds), its 95% Wilson interval, and the lemma's
    δ(ε) (None where the lemma gives none)."""

    mode: Mode
    epsilon: float
    trials: int
    over: int
    empirical_delta: float
    ci_low: float
    ci_high: float
    bound_delta: float | None


@dataclass(frozen=True)
class BehaviourRow:
    """One colluder behaviour (``behaviours.csv``); ``mean_sum_error`` in units of the
    input; ``covered_by_lemmas`` whether the lemmas' assumptions cover the behaviour."""

    mode: Mode
    behaviour: Behaviour
    trials: int
    p_infinite_loss: float
    median_loss: float
    guess_success: float
    mean_sum_error: float
    covered_by_lemmas: bool


@dataclass(frozen=True)
class NetworkedRow:
    """Views from the networked chain or their simulated twins (``networked.csv``)."""

    source: str
    rounds: int
    m: int
    modulus: int
    mean_gamma: float
    p_distinct: float
    p_infinite_loss: float
    median_loss: float
    guess_success: float


@dataclass(frozen=True)
class Headline:
    """One line of the headline table: a claim, its bound (or the reference values it is
    judged against), what was measured, and the verdict in plain words: "held" /
    "VIOLATED" for a bound, a sentence starting with "broken" where the protocol fails,
    otherwise which reference the measurement beats (see :mod:`.guessing`) or "held up" /
    "inconclusive" where no lemma applies."""

    claim: str
    bound: str
    empirical: str
    verdict: str
