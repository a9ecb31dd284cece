"""Plan selection: the parameters, bound and protocol for n users and a target (ε, δ).

:func:`select_plan` is what ``cloaknet plan`` computes, for every ``--bound``:

``optimized`` / ``theorem``
    the cloak with the planner's parameters (:func:`cloaknet.planner.plan`);
``bbgn``
    sum-preserving mode: the cloak's encoder with the Balle–Bell–Gascón–Nissim bound (also
    :func:`cloaknet.planner.plan`); single-user mode: split-and-mix with Pólya noise
    (:func:`cloaknet.protocols.bbgn_plan`), a different protocol;
``auto``
    whichever of ``optimized`` and ``bbgn`` needs fewer messages per user (then fewer bytes
    per user; ties go to ``optimized``); the other, if feasible, is kept as an alternative.

The result is a :class:`SelectedPlan`: what was asked, the bound, the noise, messages,
modulus, the achieved (ε, δ), the predicted RMSE and the bytes per user, and
:meth:`SelectedPlan.protocol` builds the :class:`~cloaknet.protocols.base.SummationProtocol`
that runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

from cloaknet import accounting, certified
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.params import MODES, Mode
from cloaknet.planner import BOUNDS, DEFAULT_MAX_MESSAGES, Bound, Plan, plan
from cloaknet.protocols import (
    BBGNPlan,
    BBGNProtocol,
    CloakProtocol,
    SummationProtocol,
    bbgn_plan,
)
from cloaknet.protocols.base import check_epsilon_delta
from cloaknet.validation import check_int

__all__ = [
    "BOUND_CHOICES",
    "BoundChoice",
    "Noise",
    "PlanRequest",
    "SelectedPlan",
    "select_plan",
]

BoundChoice = Literal["auto", "optimized", "theorem", "bbgn"]
BOUND_CHOICES: tuple[BoundChoice, ...] = ("auto", *BOUNDS)
#: The noise a plan adds: the cloak's pre-randomizer D_{N,p}, Pólya differences, or none.
Noise = Literal["truncated-laplace", "polya", "none"]

_BBGN_LEMMA = "BBGN (arXiv 1909.11225) + discrete Laplace"
_BBGN_NOTE = (
    "every user adds the difference of two Polya variables, drawn exactly (integer "
    "arithmetic, CSPRNG integers); the sum over the honest users is exactly discrete "
    'Laplace (pure epsilon-DP); the chain file form is [protocol] name = "bbgn"'
)


@dataclass(frozen=True)
class PlanRequest:
    """The validated arguments of :func:`select_plan` (``colluders`` and ``max_messages``
    filled in with their defaults; ``precision`` and ``max_users`` stay ``None`` when not
    given, meaning each bound's default)."""

    users: int
    epsilon: float
    delta: float
    mode: Mode
    bound: BoundChoice
    colluders: int
    precision: int | None
    max_users: int | None
    max_messages: int
    max_rmse: float | None


@dataclass(frozen=True)
class SelectedPlan:
    """One plan: what it runs, what it costs and what it guarantees.

    ``protocol_name`` is ``"cloak"`` (then ``plan`` is the planner's
    :class:`~cloaknet.planner.Plan`) or ``"bbgn"`` (split-and-mix with Pólya noise; then
    ``bbgn`` is its :class:`~cloaknet.protocols.BBGNPlan`). ``epsilon``/``delta`` are the
    achieved guarantee (recomputed from the bound with the final parameters), the worst case
    over rounds of ``users`` to ``max_users`` users, attained at ``evaluated_at_users``
    (``max_users`` for the sum-preserving lemmas, ``users`` otherwise; :mod:`cloaknet.guarantee`),
    ``expected_rmse`` the predicted error in input units, ``modulus`` N (messages lie in
    [0, N)), ``precision`` k. ``epsilon_exact`` is ε exactly (BBGN: k·γ) or a certified
    upper bound within 10^−48 of it (the cloak's lemmas; :mod:`cloaknet.certified`), and
    ``epsilon`` the smallest float not below it; ``meets_target`` compares ``epsilon_exact``
    and ``delta`` with the target. ``alternatives`` are the other feasible candidates of an
    ``auto`` selection (empty otherwise).
    """

    request: PlanRequest
    protocol_name: Literal["cloak", "bbgn"]
    mode: Mode
    bound: Bound
    noise: Noise
    users: int
    max_users: int
    colluders: int
    messages: int
    modulus: int
    precision: int
    epsilon: float
    delta: float
    evaluated_at_users: int
    meets_target: bool
    lemma: str
    expected_rmse: float
    bits_per_message: int
    bytes_per_message: int
    notes: tuple[str, ...]
    epsilon_exact: Fraction
    plan: Plan | None = None
    bbgn: BBGNPlan | None = None
    alternatives: tuple[SelectedPlan, ...] = field(default=(), compare=False)

    @property
    def target_epsilon(self) -> float:
        return self.request.epsilon

    @property
    def target_delta(self) -> float:
        return self.request.delta

    @property
    def bytes_per_user(self) -> int:
        """``messages · bytes_per_message``."""
        return self.messages * self.bytes_per_message

    def protocol(self) -> SummationProtocol:
        """The protocol that runs this plan: a :class:`~cloaknet.protocols.CloakProtocol`
        (keeping ``plan``) or a :class:`~cloaknet.protocols.BBGNProtocol`."""
        if self.plan is not None:
            return CloakProtocol.from_plan(self.plan)
        assert self.bbgn is not None
        return BBGNProtocol.from_plan(self.bbgn)

    def summary(self) -> dict[str, Any]:
        """What a run of this plan reports about its parameters (the demos' JSON): the
        protocol, ``bound``, ``lemma``, ``noise``, ``messages_per_user``, modulus, precision,
        the achieved (ε, δ) with ``epsilon_exact`` (module doc), the target, whether it is
        met, the round size the guarantee is evaluated at and the predicted RMSE."""
        return {
            "protocol": self.protocol_name,
            "mode": self.mode,
            "bound": self.bound,
            "lemma": self.lemma,
            "noise": self.noise,
            "messages_per_user": self.messages,
            "modulus": self.modulus,
            "precision": self.precision,
            "epsilon": self.epsilon,
            "epsilon_exact": certified.decimal_up(self.epsilon_exact),
            "delta": self.delta,
            "target_epsilon": self.target_epsilon,
            "target_delta": self.target_delta,
            "meets_target": self.meets_target,
            "evaluated_at_users": self.evaluated_at_users,
            "expected_rmse": self.expected_rmse,
        }

    def to_json(self) -> dict[str, Any]:
        """The ``cloaknet plan --json`` object (without ``alternatives``)."""
        if self.plan is not None:
            return self.plan.to_json()
        assert self.bbgn is not None
        return {
            "protocol": "bbgn",
            "mode": "single-user",
            "bound": "bbgn",
            "users": self.users,
            "max_users": self.max_users,
            "colluders": self.colluders,
            "target_epsilon": self.target_epsilon,
            "target_delta": self.target_delta,
            "messages_per_user": self.messages,
            "modulus": self.modulus,
            "precision": self.precision,
            "gamma": None,
            "noise": "polya",
            "noise_p": math.exp(self.bbgn.log_alpha),
            "noise_q": 1.0,
            "noise_gamma": _fraction_text(self.bbgn.noise_gamma),
            "noise_shape": _fraction_text(self.bbgn.noise_shape),
            "epsilon": self.epsilon,
            "epsilon_exact": certified.decimal_up(self.epsilon_exact),
            "delta": self.delta,
            "evaluated_at_users": self.evaluated_at_users,
            "meets_target": self.meets_target,
            "lemma": self.lemma,
            "bits_per_message": self.bits_per_message,
            "bytes_per_message": self.bytes_per_message,
            "bytes_per_user": self.bytes_per_user,
            "expected_rmse": self.expected_rmse,
            "notes": list(self.notes),
        }


def _fraction_text(value: Fraction) -> str:
    """``value`` as ``"num/den"``."""
    return f"{value.numerator}/{value.denominator}"


def _request(
    users: int,
    epsilon: float,
    delta: float,
    mode: str,
    bound: str,
    max_users: int | None,
    colluders: int | None,
    precision: int | None,
    max_messages: int | None,
    max_rmse: float | None,
) -> PlanRequest:
    """Validate what every bound needs; bound-specific limits are checked by each bound."""
    n, eps, dlt = check_epsilon_delta(users, epsilon, delta)
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    choice = next((each for each in BOUND_CHOICES if each == bound), None)
    if choice is None:
        raise ParameterError(f"bound must be one of {', '.join(BOUND_CHOICES)}, got {bound!r}")
    c = 0 if colluders is None else check_int("colluders", colluders, 0)
    if c >= n:
        raise ParameterError(f"colluders ({c}) must be fewer than users ({n})")
    k = None if precision is None else check_int("precision", precision, 1)
    n_max = None if max_users is None else check_int("max_users", max_users, n)
    limit = DEFAULT_MAX_MESSAGES if max_messages is None else check_int(
        "max_messages", max_messages, 4
    )
    if max_rmse is not None and not (
        isinstance(max_rmse, int | float) and math.isfinite(max_rmse) and max_rmse > 0
    ):
        raise ParameterError(f"max_rmse must be a positive number, got {max_rmse!r}")
    return PlanRequest(
        users=n,
        epsilon=eps,
        delta=dlt,
        mode="single-user" if mode == "single-user" else "sum-preserving",
        bound=choice,
        colluders=c,
        precision=k,
        max_users=n_max,
        max_messages=limit,
        max_rmse=max_rmse,
    )


def _from_plan(request: PlanRequest, made: Plan) -> SelectedPlan:
    params = made.params
    return SelectedPlan(
        request=request,
        protocol_name="cloak",
        mode=made.mode,
        bound=made.bound,
        noise="truncated-laplace" if params.noise is not None else "none",
        users=made.users,
        max_users=params.max_users,
        colluders=made.colluders,
        messages=params.messages,
        modulus=params.modulus,
        precision=params.precision,
        epsilon=made.epsilon,
        delta=made.delta,
        evaluated_at_users=made.evaluated_at_users,
        meets_target=made.meets_target,
        lemma=made.guarantee.lemma,
        expected_rmse=made.expected_rmse,
        bits_per_message=params.bits_per_message,
        bytes_per_message=params.share_bytes,
        notes=made.notes,
        epsilon_exact=made.epsilon_exact,
        plan=made,
    )


def _bbgn_single_user(request: PlanRequest) -> SelectedPlan:
    """Single-user changes with the BBGN bound: split-and-mix with Pólya noise for rounds of
    ``users`` to ``max_users`` users (noise and messages planned for the smallest round, the
    modulus for the largest: :func:`cloaknet.protocols.bbgn_plan`). By construction m meets
    the message bound for σ = log2((1 + e^ε)/δ) with the fewest honest users, so the achieved
    (ε, (1 + e^ε)·2^−σ') with σ' >= σ meets the target in every round of the range."""
    if request.max_rmse is not None:
        raise ParameterError("--max-rmse applies to the cloak's pre-randomizer only")
    b = bbgn_plan(
        request.users,
        request.epsilon,
        request.delta,
        request.colluders,
        precision=request.precision,
        max_users=request.max_users,
    )
    if b.messages > request.max_messages:
        raise InfeasiblePlanError(
            f"the BBGN bound needs {b.messages} messages per user, more than "
            f"max_messages = {request.max_messages}"
        )
    sigma = accounting.bbgn_achieved_sigma(b.messages, b.honest, b.modulus)
    # (1 + e^ε)·2^−σ in log space (no overflow for large ε)
    delta = math.exp(b.epsilon + math.log1p(math.exp(-b.epsilon)) - sigma * math.log(2.0))
    exact = b.epsilon_exact
    return SelectedPlan(
        request=request,
        protocol_name="bbgn",
        mode="single-user",
        bound="bbgn",
        noise="polya",
        users=b.users,
        max_users=b.max_users,
        colluders=b.colluders,
        messages=b.messages,
        modulus=b.modulus,
        precision=b.precision,
        epsilon=certified.float_up(exact),
        delta=delta,
        evaluated_at_users=b.users,
        meets_target=exact <= Fraction(request.epsilon) and delta <= request.delta,
        lemma=_BBGN_LEMMA,
        expected_rmse=b.predicted_rmse,
        bits_per_message=b.bits_per_message,
        bytes_per_message=max(1, (b.bits_per_message + 7) // 8),
        notes=(_BBGN_NOTE, accounting.BBGN_UNVERIFIED),
        epsilon_exact=exact,
        bbgn=b,
    )


def _one_bound(request: PlanRequest, bound: Bound) -> SelectedPlan:
    if bound == "bbgn" and request.mode == "single-user":
        return _bbgn_single_user(request)
    made = plan(
        request.users,
        request.epsilon,
        request.delta,
        request.precision,
        request.mode,
        request.colluders,
        bound=bound,
        max_users=request.max_users,
        max_messages=request.max_messages,
        max_rmse=request.max_rmse,
    )
    return _from_plan(request, made)


def select_plan(
    users: int,
    epsilon: float,
    delta: float,
    *,
    mode: str = "single-user",
    bound: str = "auto",
    max_users: int | None = None,
    colluders: int | None = None,
    precision: int | None = None,
    max_messages: int | None = None,
    max_rmse: float | None = None,
) -> SelectedPlan:
    """Plan for ``users`` users and the target (``epsilon``, ``delta``) with ``bound``
    (one of :data:`BOUND_CHOICES`; module doc).

    :param mode: ``"single-user"`` or ``"sum-preserving"`` neighbouring datasets.
    :param max_users: the largest round the parameters must analyze (default ``users``);
        sum-preserving plans of the cloak's lemmas are private up to it (planned and reported
        at ``max_users``, where Lemma 6 is weakest); the single-user ``bbgn`` protocol plans
        its noise and messages for ``users`` and its modulus for ``max_users``.
    :param colluders: users assumed to reveal everything to the analyst (default 0).
    :param precision: k (default: each bound's own; 10·n for the cloak).
    :param max_messages: limit on messages per user (default
        :data:`cloaknet.planner.DEFAULT_MAX_MESSAGES`).
    :param max_rmse: the cloak's single-user mode only: the largest predicted RMSE.
    :raises ParameterError: invalid arguments, or (for one explicit bound) arguments that
        bound does not take.
    :raises InfeasiblePlanError: no parameters meet the target within the limits (with
        ``auto``: neither bound does; the message gives both reasons).
    """
    request = _request(
        users, epsilon, delta, mode, bound, max_users, colluders, precision, max_messages,
        max_rmse,
    )
    if request.bound != "auto":
        return _one_bound(request, request.bound)
    candidates: list[SelectedPlan] = []
    reasons: list[str] = []
    for each in ("optimized", "bbgn"):
        try:
            candidates.append(_one_bound(request, each))
        except (ParameterError, InfeasiblePlanError) as exc:
            reasons.append(f"{each}: {exc}")
    if not candidates:
        raise InfeasiblePlanError(
            f"neither bound gives parameters for this request ({'; '.join(reasons)})"
        )
    chosen = min(candidates, key=lambda c: (c.messages, c.bytes_per_user))
    others = tuple(c for c in candidates if c is not chosen)
    return replace(chosen, alternatives=others)
