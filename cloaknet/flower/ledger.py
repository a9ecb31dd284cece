"""The privacy spent by a Flower training run, round by round, from :mod:`cloaknet.fl_accounting`.

An :class:`~cloaknet.fl_accounting.FLPlan` fixes the Skellam variance μ, the sensitivities and
the split-and-mix σ for T rounds at a target (ε, δ). After t <= T rounds the run has released t
vector sums, so it is (ε_t, δ_t)-DP with

    ε_t = the RDP of t Skellam rounds at δ_RDP, converted (:func:`skellam_epsilon`),
    δ_t = δ_RDP + (1 + e^ε_t)·t·d·2^−σ   (the split-and-mix distance of t·d coordinates),

the plan's own accounting with T replaced by t (``docs/accounting.md``). At t = T this is the
plan's (``epsilon_achieved``, at most ``delta_achieved``). A round is *charged* when clients are
asked to submit, before anything is released, so a round whose sum is never read still counts;
the ledger refuses a round beyond T (:class:`PrivacyBudgetExhausted`). Flower 1.42's own
``flwr.serverapp.PrivacyAccountant`` composes Gaussian events only, so it cannot account for
this mechanism; the ledger is cloaknet's.

Without a plan (the noiseless protocol) there is no differential privacy: ε = ∞.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cloaknet.errors import CloakError
from cloaknet.fl_accounting import FLPlan, skellam_epsilon

__all__ = ["PrivacyBudgetExhausted", "PrivacyLedger", "Spent"]


class PrivacyBudgetExhausted(CloakError):
    """Another round would exceed the rounds the plan's (ε, δ) was computed for."""


@dataclass(frozen=True)
class Spent:
    """The guarantee after ``rounds`` released rounds of ``planned_rounds``: (``epsilon``,
    ``delta``) for the whole run so far (``epsilon`` = ∞ and ``delta`` = 0 without noise)."""

    rounds: int
    planned_rounds: int | None
    epsilon: float
    delta: float

    def describe(self) -> str:
        """One line for the log."""
        if math.isinf(self.epsilon):
            return (f"privacy: none (no noise) after {self.rounds} round(s): the shuffle hides "
                    "who sent which share, but the released sums are exact")
        return (f"privacy spent after {self.rounds} of {self.planned_rounds} round(s): "
                f"ε = {self.epsilon:.4f}, δ = {self.delta:.3g} (Skellam RDP + split-and-mix)")


class PrivacyLedger:
    """Counts the rounds of one run against ``plan`` (``None``: the noiseless protocol).

    :meth:`charge` before each round; :meth:`spent` for any number of rounds.
    """

    def __init__(self, plan: FLPlan | None) -> None:
        if plan is not None and not isinstance(plan, FLPlan):
            raise TypeError(f"plan must be an FLPlan or None, not {type(plan).__name__}")
        self.plan = plan
        self._rounds = 0

    @property
    def rounds(self) -> int:
        """Rounds charged so far."""
        return self._rounds

    def spent(self, rounds: int | None = None) -> Spent:
        """The guarantee after ``rounds`` rounds (default: those charged); module doc.

        :raises ValueError: ``rounds`` negative or above the plan's T.
        """
        t = self._rounds if rounds is None else rounds
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {t!r}")
        plan = self.plan
        if plan is None:
            return Spent(t, None, math.inf if t else 0.0, 0.0)
        if t > plan.rounds:
            raise ValueError(f"the plan covers {plan.rounds} rounds, not {t}")
        if t == 0:
            return Spent(0, plan.rounds, 0.0, 0.0)
        eps, _ = skellam_epsilon(plan.noise_variance, plan.l2_sensitivity_sq,
                                 plan.l1_sensitivity, t, plan.delta_rdp)
        log2_one_plus = (eps + math.log1p(math.exp(-eps))) / math.log(2.0)
        delta_sm = 2.0 ** (log2_one_plus + math.log2(t * plan.dimension) - plan.sigma)
        return Spent(t, plan.rounds, eps, plan.delta_rdp + delta_sm)

    def charge(self) -> Spent:
        """Count one more round and return the guarantee including it.

        :raises PrivacyBudgetExhausted: the plan's T rounds are used up (nothing is charged).
        """
        if self.plan is not None and self._rounds >= self.plan.rounds:
            raise PrivacyBudgetExhausted(
                f"the plan's (ε, δ) = ({self.plan.epsilon:g}, {self.plan.delta:g}) covers "
                f"{self.plan.rounds} rounds; all are spent"
            )
        self._rounds += 1
        return self.spent()
