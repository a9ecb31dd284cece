"""The chain file's ``[protocol]`` table: reading it into a protocol, and writing it.

Three forms (``docs/chainfile.md``): the cloak's explicit parameters (what
:func:`protocol_section` writes), ``plan = {...}`` (planned when the file is loaded, exactly
as ``cloaknet plan`` plans: :func:`cloaknet.plans.select_plan`, ``bound`` default ``auto``,
so it may select split-and-mix with Pólya noise), and ``name = "bbgn" | "blanket" |
"cheu"`` (a comparison protocol planned for exactly ``users`` users; ``bbgn`` also takes
``max_users`` for rounds of ``users`` to ``max_users`` users); ``name = "vector"`` is
read by :mod:`cloaknet.vector_table` (vector sums). :func:`read_protocol_table`
turns any of them into a :class:`~cloaknet.protocols.base.SummationProtocol`; every problem
is a
:class:`ChainFileError` naming the field. A cloak whose guarantee is stated (a plan, or
explicit parameters with ``epsilon``/``delta``) is checked for every round size ``[round]``
allows, where each bound is weakest (:mod:`cloaknet.guarantee`): the sum-preserving Lemma 6
(12) at ``[round].max_users``, the single-user Lemma 11 (13) and BBGN at
``[round].min_users``. :mod:`cloaknet.chainfile` adds the generic chain and the file itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.guarantee import range_problem
from cloaknet.params import MODES, CloakParams, NoiseParams
from cloaknet.planner import BOUNDS, Plan
from cloaknet.plans import BOUND_CHOICES, SelectedPlan, select_plan
from cloaknet.protocols import CloakProtocol, SummationProtocol, make_protocol
from cloaknet.table_fields import (
    ChainFileError,
    check_users,
    fraction_field,
    int_field,
    modulus_field,
    number_field,
    plan_request,
    required,
    show,
    type_name,
)
from cloaknet.vector_table import VECTOR_PROTOCOL, read_vector_table
from mixnet.chain import RoundPolicy

__all__ = [
    "CHAIN_PROTOCOLS",
    "ChainFileError",
    "check_policy",
    "protocol_section",
    "read_protocol_table",
    "selected_section",
]

#: Comparison protocols a chain can run by name (the cloak is run by the explicit or
#: ``plan`` forms; the trusted curator cannot run in a chain).
CHAIN_PROTOCOLS = ("blanket", "cheu", "bbgn")
_NAMED_KEYS = ("name", "users", "epsilon", "delta", "colluders", "precision", "max_users")
#: The ``[protocol]`` keys that define the cloak's parameters.
_EXPLICIT_KEYS = (
    "mode",
    "messages",
    "modulus",
    "precision",
    "max_users",
    "noise_scale",
    "noise_q",
)
#: Keys a plan adds for people to read. With ``epsilon`` or ``delta`` the claim is checked
#: over ``[round]`` (using ``gamma``, ``bound`` and ``colluders``); ``users`` is checked.
_INFO_KEYS = ("users", "colluders", "epsilon", "delta", "gamma", "bound")
#: Arguments of ``[protocol].plan`` (those of :func:`cloaknet.plans.select_plan`).
_PLAN_KEYS = (
    "users",
    "epsilon",
    "delta",
    "mode",
    "precision",
    "colluders",
    "bound",
    "max_messages",
    "max_rmse",
)
def check_policy(policy: RoundPolicy, protocol: SummationProtocol, plan: Plan | None) -> None:
    """Raise :class:`ChainFileError` (without a source) unless rounds of ``policy`` fit
    ``protocol``: ``[round].max_users <= protocol.max_round_users`` (the analyzer's limit)
    and ``[round].min_users >= protocol.min_round_users`` and ``>= plan.users`` (privacy is
    planned for that many). A protocol planned for exactly n users (both limits n) needs
    ``min_users = max_users = n``. With ``plan``, ``protocol`` must be the cloak with
    ``plan.params``, and the plan's guarantee, recomputed for the weakest round size in
    ``[min_users, max_users]`` (:func:`cloaknet.guarantee.guarantee_over_rounds`), must meet
    its target (ε, δ)."""
    if plan is not None:
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a Plan or None, not {type(plan).__name__}")
        if not isinstance(protocol, CloakProtocol) or protocol.params != plan.params:
            raise ChainFileError("the plan's parameters differ from the protocol's",
                                 field="protocol")
    users_field = "protocol.users" if plan is None else "protocol.plan.users"
    low, high = protocol.min_round_users, protocol.max_round_users
    if plan is not None:
        low = max(low, plan.users)
    if low == high and not policy.min_users == policy.max_users == low:
        raise ChainFileError(
            f"protocol {protocol.name!r} is planned for exactly {low} users; set "
            f"[round].min_users = [round].max_users = {low} "
            f"(they are {policy.min_users} and {policy.max_users})",
            field=users_field,
        )
    if high < policy.max_users:
        raise ChainFileError(
            f"parameters analyze rounds of at most {high} users, "
            f"but [round].max_users is {policy.max_users}",
            field="protocol.max_users",
        )
    check_users(low, policy.min_users, field=users_field)
    if plan is not None:
        _check_rounds(
            policy, plan.params, plan.gamma, plan.bound, plan.colluders,
            {"epsilon": plan.target_epsilon, "delta": plan.target_delta},
            stated="target", prefix="protocol.plan", field="protocol.plan",
        )


def _check_rounds(
    policy: RoundPolicy,
    params: CloakParams,
    gamma: float,
    bound: str,
    colluders: int,
    limits: Mapping[str, float],
    *,
    stated: str,
    prefix: str,
    field: str,
) -> None:
    """:class:`ChainFileError` unless the guarantee of ``params`` stays within ``limits`` for
    every round size in ``[policy.min_users, policy.max_users]``
    (:func:`cloaknet.guarantee.range_problem`: Lemma 6 (12) at ``max_users``, Lemma 11 (13)
    and BBGN at ``min_users``). ``field`` names the error, or with ``field == "protocol"``
    its first failing ``protocol.epsilon``/``protocol.delta``."""
    try:
        found = range_problem(
            params, gamma, bound, policy.min_users, policy.max_users, colluders, limits,
            stated=stated, prefix=prefix,
        )
    except ParameterError as exc:
        raise ChainFileError(
            f"cannot recompute the stated guarantee for rounds of [round].min_users = "
            f"{policy.min_users} to [round].max_users = {policy.max_users} users: {exc}",
            field=field,
        ) from None
    if found is not None:
        key, problem = found
        raise ChainFileError(problem, field=field if field != "protocol" else f"{field}.{key}")


# --------------------------------------------------------------------------- reading


def read_protocol_table(
    table: Mapping[str, Any] | None, policy: RoundPolicy
) -> tuple[SummationProtocol, Plan | None]:
    """The protocol a ``[protocol]`` table (``None`` if missing) describes for a chain with
    round policy ``policy``, and the :class:`~cloaknet.planner.Plan` when the table asked
    for planning (``None`` otherwise).

    The explicit form's ``max_users`` defaults to ``policy.max_users``; a ``plan`` request's
    ``users`` defaults to ``policy.min_users`` and its ``max_users`` is always
    ``policy.max_users``; it is planned by :func:`cloaknet.plans.select_plan` (``bound``
    default ``auto``, as ``cloaknet plan``), and when that selects split-and-mix with Pólya
    noise the protocol is a :class:`~cloaknet.protocols.BBGNProtocol` and the returned plan
    ``None``. The planned-for ``users`` of the explicit and ``plan`` forms are checked
    against ``policy.min_users`` here; the rest of the fit is :func:`check_policy`. A table
    with ``name = "vector"`` gives a
    :class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`
    (:func:`cloaknet.vector_table.read_vector_table`) and no plan.

    :raises ChainFileError: (without a source) naming the field of every problem, keeping
        the reason of the planner, :class:`~cloaknet.params.CloakParams` or the protocol.
    """
    if table is None:
        raise ChainFileError("missing table [protocol]", field="protocol")
    if table.get("name") == VECTOR_PROTOCOL:
        return read_vector_table(table, policy), None
    if "name" in table:
        return _named(table), None
    for key in table:
        if key not in (*_EXPLICIT_KEYS, *_INFO_KEYS, "plan"):
            raise ChainFileError(
                "unknown key (allowed: plan, or the explicit parameters "
                f"{', '.join(_EXPLICIT_KEYS)})",
                field=f"protocol.{key}",
            )
    if "plan" in table:
        selected = _planned(table, policy)
        if selected.plan is None:
            return selected.protocol(), None
        return CloakProtocol.from_plan(selected.plan), selected.plan
    protocol = CloakProtocol(_explicit(table, policy))
    if "epsilon" in table and "delta" in table:
        # checked over every round size of the policy by _explicit: the results carry it
        protocol.epsilon, protocol.delta = float(table["epsilon"]), float(table["delta"])
    return protocol, None


def _named(table: Mapping[str, Any]) -> SummationProtocol:
    """The comparison protocol of ``[protocol] name = ...``."""
    name = table["name"]
    if name not in CHAIN_PROTOCOLS:
        raise ChainFileError(
            f"unknown protocol {show(name)} (chains run: {', '.join(CHAIN_PROTOCOLS)}, "
            f"{VECTOR_PROTOCOL!r} for vector sums, or the cloak via plan = {{...}} or "
            "explicit parameters)",
            field="protocol.name",
        )
    for key in table:
        if key not in _NAMED_KEYS:
            raise ChainFileError(
                f"unknown key for protocol {name!r} (allowed: {', '.join(_NAMED_KEYS)})",
                field=f"protocol.{key}",
            )
    users = int_field(required(table, "users", "protocol"), "protocol.users")
    options = {
        key: int_field(table[key], f"protocol.{key}")
        for key in ("colluders", "precision", "max_users")
        if key in table
    }
    values = []
    for key in ("epsilon", "delta"):
        value = required(table, key, "protocol")
        values.append(number_field(value, f"protocol.{key}", kind=show(value)))
    epsilon, delta = values
    try:
        return make_protocol(name, users, epsilon, delta, **options)
    except (ParameterError, InfeasiblePlanError) as exc:
        raise ChainFileError(str(exc), field="protocol") from None


def _planned(table: Mapping[str, Any], policy: RoundPolicy) -> SelectedPlan:
    """Plan as ``table["plan"]`` asks, with :func:`cloaknet.plans.select_plan` (what
    ``cloaknet plan --users <users> --max-users <[round].max_users>`` selects)."""
    for key in table:
        if key in _EXPLICIT_KEYS:
            raise ChainFileError(
                "explicit parameters are not allowed together with protocol.plan",
                field=f"protocol.{key}",
            )
    request = plan_request(table["plan"], _PLAN_KEYS, example="{ epsilon = 1.0, delta = 1e-6 }")
    arguments: dict[str, Any] = {}
    for key in ("users", "precision", "colluders", "max_messages"):
        if key in request:
            arguments[key] = int_field(request[key], f"protocol.plan.{key}")
    for key in ("epsilon", "delta", "max_rmse"):
        if key in request:
            value = request[key]
            arguments[key] = number_field(value, f"protocol.plan.{key}", kind=type_name(value))
        elif key != "max_rmse":
            raise ChainFileError("missing", field=f"protocol.plan.{key}")
    for key, allowed in (("mode", MODES), ("bound", BOUND_CHOICES)):
        if key in request:
            value = request[key]
            if not isinstance(value, str) or value not in allowed:
                raise ChainFileError(
                    f"expected one of {', '.join(allowed)}, got {show(value)}",
                    field=f"protocol.plan.{key}",
                )
            arguments[key] = value
    users = arguments.pop("users", policy.min_users)
    check_users(users, policy.min_users, field="protocol.plan.users")
    try:
        return select_plan(
            users,
            arguments.pop("epsilon"),
            arguments.pop("delta"),
            max_users=policy.max_users,
            **arguments,
        )
    except (ParameterError, InfeasiblePlanError) as exc:
        raise ChainFileError(str(exc), field="protocol.plan") from None


def _noise(table: Mapping[str, Any]) -> NoiseParams:
    """The single-user noise parameters of the explicit ``[protocol]``."""
    scale = fraction_field(required(table, "noise_scale", "protocol"), "protocol.noise_scale")
    q = fraction_field(required(table, "noise_q", "protocol"), "protocol.noise_q")
    try:
        NoiseParams(scale=scale, q=Fraction(1))
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol.noise_scale") from None
    try:
        return NoiseParams(scale=scale, q=q)
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol.noise_q") from None


def _explicit(table: Mapping[str, Any], policy: RoundPolicy) -> CloakParams:
    """The cloak's explicit parameters in ``table``."""
    mode = required(table, "mode", "protocol")
    if not isinstance(mode, str) or mode not in MODES:
        raise ChainFileError(
            f"expected one of {', '.join(MODES)}, got {show(mode)}", field="protocol.mode"
        )
    messages = int_field(required(table, "messages", "protocol"), "protocol.messages")
    precision = int_field(required(table, "precision", "protocol"), "protocol.precision")
    modulus = modulus_field(required(table, "modulus", "protocol"))
    max_users = policy.max_users
    if "max_users" in table:
        max_users = int_field(table["max_users"], "protocol.max_users")
    if "users" in table:
        users = int_field(table["users"], "protocol.users")
        check_users(users, policy.min_users, field="protocol.users")
    noise: NoiseParams | None = None
    if mode == "single-user":
        noise = _noise(table)
    else:
        for key in ("noise_scale", "noise_q"):
            if key in table:
                raise ChainFileError("allowed in single-user mode only", field=f"protocol.{key}")
    try:
        params = CloakParams(
            modulus=modulus,
            precision=precision,
            messages=messages,
            max_users=max_users,
            mode="single-user" if mode == "single-user" else "sum-preserving",
            noise=noise,
        )
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol") from None
    _check_claim(table, params, policy)
    return params


def _check_claim(table: Mapping[str, Any], params: CloakParams, policy: RoundPolicy) -> None:
    """Check the explicit table's informational ``epsilon``/``delta`` (if either is given)
    over every round size of ``policy`` (:func:`_check_rounds`: Lemma 6/12 at
    ``max_users``, Lemma 11/13 and BBGN at ``min_users``), with its ``gamma`` (required
    then, except for the BBGN bound), ``bound`` (default ``optimized``) and ``colluders``
    (default 0). Parameters too small for ``[round].max_users`` are left to
    :func:`check_policy`."""
    limits: dict[str, float] = {}
    for key in ("epsilon", "delta"):
        if key in table:
            value = table[key]
            limits[key] = number_field(value, f"protocol.{key}", kind=type_name(value))
    if not limits or params.max_users < policy.max_users:
        return
    bound = table.get("bound", "optimized")
    if not isinstance(bound, str) or bound not in BOUNDS:
        raise ChainFileError(
            f"expected one of {', '.join(BOUNDS)}, got {show(bound)}", field="protocol.bound"
        )
    colluders = int_field(table.get("colluders", 0), "protocol.colluders")
    gamma = 0.0
    if params.mode == "single-user" or bound != "bbgn":
        if "gamma" not in table:
            raise ChainFileError(
                "missing: needed to check the stated protocol.epsilon/protocol.delta over "
                f"rounds of [round].min_users = {policy.min_users} to [round].max_users = "
                f"{policy.max_users} users",
                field="protocol.gamma",
            )
        value = table["gamma"]
        gamma = number_field(value, "protocol.gamma", kind=type_name(value))
    _check_rounds(
        policy, params, gamma, bound, colluders, limits,
        stated="claimed", prefix="protocol", field="protocol",
    )


# --------------------------------------------------------------------------- writing


def _fraction_text(value: Fraction) -> str:
    """``value`` as ``"num/den"`` (always with a denominator)."""
    return f"{value.numerator}/{value.denominator}"


def protocol_section(params: CloakParams, plan: Plan | None = None) -> dict[str, Any]:
    """The explicit ``[protocol]`` table for ``params`` (what :func:`read_protocol_table`
    reads back).

    ``modulus`` is a decimal string and the noise fractions are ``"num/den"`` strings, so
    nothing is lost. With ``plan`` (which must be the plan that produced ``params``;
    ``ValueError`` otherwise) the informational keys ``users``, ``colluders``, ``epsilon``,
    ``delta``, ``gamma`` and ``bound`` are added. Raises ``TypeError`` for wrong types.
    """
    if not isinstance(params, CloakParams):
        raise TypeError(f"params must be CloakParams, not {type(params).__name__}")
    section: dict[str, Any] = {
        "mode": params.mode,
        "messages": params.messages,
        "modulus": str(params.modulus),
        "precision": params.precision,
        "max_users": params.max_users,
    }
    if params.noise is not None:
        section["noise_scale"] = _fraction_text(params.noise.scale)
        section["noise_q"] = _fraction_text(params.noise.q)
    if plan is not None:
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a Plan or None, not {type(plan).__name__}")
        if plan.params != params:
            raise ValueError("plan.params differ from params")
        section["users"] = plan.users
        section["colluders"] = plan.colluders
        section["epsilon"] = plan.epsilon
        section["delta"] = plan.delta
        section["gamma"] = plan.gamma
        section["bound"] = plan.bound
    return section


def selected_section(selected: SelectedPlan) -> dict[str, Any]:
    """The ``[protocol]`` table that runs ``selected``: the cloak's explicit parameters
    (:func:`protocol_section`, with the plan's informational keys), or for split-and-mix
    with Pólya noise the named form ``name = "bbgn"`` with the requested ``users``,
    ``epsilon`` and ``delta`` (plus ``colluders`` if not 0, ``precision`` if it was
    requested and ``max_users`` if it is not ``users``), which the chain re-plans to the
    same parameters when it loads the file."""
    if selected.plan is not None:
        return protocol_section(selected.plan.params, selected.plan)
    request = selected.request
    table: dict[str, Any] = {
        "name": selected.protocol_name,
        "users": request.users,
        "epsilon": request.epsilon,
        "delta": request.delta,
    }
    if request.colluders:
        table["colluders"] = request.colluders
    if request.precision is not None:
        table["precision"] = request.precision
    if selected.max_users != selected.users:
        table["max_users"] = selected.max_users
    return table
