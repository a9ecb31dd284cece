"""The chain file's ``[protocol]`` table for vector sums: ``name = "vector"``.

Two forms (``docs/chainfile.md``, "Vector sums"); both give a
:class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`::

    [protocol]                       # planned when the file is loaded (cloaknet plan-fl)
    name = "vector"
    plan = { dimension = 650, clip = 1.0, rounds = 10, epsilon = 3.0, delta = 1e-5 }

    [protocol]                       # explicit parameters (VectorParams.to_json's keys)
    name = "vector"
    dimension = 650
    clip = 1.0
    scale = 1024.0
    norm_bound_sq = 1060000
    noise_variance = "8192/3"        # per user and coordinate: an exact fraction (or an int)
    messages = 15
    modulus = "61046839"             # decimal string (or an int)
    window = 30523419
    min_users = 300                  # optional: default [round].min_users
    max_users = 300                  # optional: default [round].max_users

The plan form runs :func:`cloaknet.fl_accounting.plan_fl` (deterministic, so every node and
client derives the same parameters) for rounds of ``users`` (default ``[round].min_users``)
to ``[round].max_users`` users; its optional keys are ``users``, ``colluders``,
``neighbouring``, ``scale``, ``overhead``, ``beta`` and ``split_and_mix_share``, as
``cloaknet plan-fl`` takes them. Its (ε, δ) is for the **whole training** of ``rounds``
rounds: the chain does not count rounds, so running more rounds with the same users
exceeds it. The explicit form states no guarantee (results report ε and δ as null).

Every problem is a :class:`~cloaknet.table_fields.ChainFileError` naming the field: a
missing or unknown key, a value of the wrong type, parameters
:class:`~cloaknet.protocols.vector.VectorParams` or the planner refuse (their reason kept),
and parameters that do not fit ``[round]`` — rounds may close with ``[round].min_users``
users, so privacy must be planned for at most that many (``min_users``, or the plan's
``users``), and the decoding window must serve ``[round].max_users`` (``max_users``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.table_fields import (
    ChainFileError,
    check_users,
    fraction_field,
    int_field,
    modulus_field,
    number_field,
    plan_request,
    required,
    type_name,
)
from mixnet.chain import RoundPolicy

if TYPE_CHECKING:
    from cloaknet.fl_accounting import FLPlan

__all__ = [
    "VECTOR_PROTOCOL",
    "read_vector_table",
    "vector_plan_section",
    "vector_section",
]

#: ``[protocol].name`` of vector sums.
VECTOR_PROTOCOL: Final[str] = "vector"
#: The explicit form's keys (those of :meth:`VectorParams.to_json`), in writing order.
_EXPLICIT_KEYS: Final = (
    "dimension", "clip", "scale", "norm_bound_sq", "noise_variance", "messages", "modulus",
    "window", "min_users", "max_users",
)
_REQUIRED_PLAN_KEYS: Final = ("dimension", "clip", "rounds", "epsilon", "delta")
_OPTIONAL_PLAN_KEYS: Final = (
    "users", "colluders", "neighbouring", "scale", "overhead", "beta", "split_and_mix_share",
)
_PLAN_INTS: Final = ("dimension", "rounds", "users", "colluders", "scale")
_PLAN_NUMBERS: Final = ("clip", "epsilon", "delta", "overhead", "beta", "split_and_mix_share")


def read_vector_table(table: Mapping[str, Any], policy: RoundPolicy) -> VectorChainProtocol:
    """The vector protocol of a ``[protocol]`` table with ``name = "vector"``, for a chain
    with round policy ``policy`` (module doc).

    :raises ChainFileError: (without a source) naming the field of every problem.
    """
    if table.get("name") != VECTOR_PROTOCOL:
        raise ChainFileError(f"expected name = {VECTOR_PROTOCOL!r}", field="protocol.name")
    if "plan" in table:
        for key in table:
            if key not in ("name", "plan"):
                raise ChainFileError(
                    "not allowed together with protocol.plan (the plan chooses the "
                    "parameters)" if key in _EXPLICIT_KEYS else
                    "unknown key (allowed with a plan: name, plan)",
                    field=f"protocol.{key}",
                )
        return _planned(table["plan"], policy)
    for key in table:
        if key != "name" and key not in _EXPLICIT_KEYS:
            raise ChainFileError(
                "unknown key for protocol 'vector' (allowed: plan, or "
                f"{', '.join(_EXPLICIT_KEYS)})",
                field=f"protocol.{key}",
            )
    return VectorChainProtocol.from_params(_explicit(table, policy))


def _explicit(table: Mapping[str, Any], policy: RoundPolicy) -> VectorParams:
    """The explicit parameters, checked against ``policy``."""
    ints = {
        key: int_field(required(table, key, "protocol"), f"protocol.{key}")
        for key in ("dimension", "norm_bound_sq", "messages")
    }
    numbers = {}
    for key in ("clip", "scale"):
        value = required(table, key, "protocol")
        numbers[key] = number_field(value, f"protocol.{key}", kind=type_name(value))
    noise = fraction_field(required(table, "noise_variance", "protocol"), "protocol.noise_variance")
    modulus = modulus_field(required(table, "modulus", "protocol"), "protocol.modulus")
    window = modulus_field(required(table, "window", "protocol"), "protocol.window")
    low = int_field(table.get("min_users", policy.min_users), "protocol.min_users")
    high = int_field(table.get("max_users", policy.max_users), "protocol.max_users")
    try:
        params = VectorParams(
            dimension=ints["dimension"], clip=numbers["clip"], scale=numbers["scale"],
            norm_bound_sq=ints["norm_bound_sq"], noise_variance=noise,
            messages=ints["messages"], modulus=modulus, window=window,
            min_users=low, max_users=high,
        )
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol") from None
    _check_fit(params, policy, users_field="protocol.min_users")
    return params


def _planned(request: object, policy: RoundPolicy) -> VectorChainProtocol:
    """Plan as ``[protocol].plan`` asks (:func:`cloaknet.fl_accounting.plan_fl`)."""
    request = plan_request(
        request, (*_REQUIRED_PLAN_KEYS, *_OPTIONAL_PLAN_KEYS),
        example="{ dimension = 650, clip = 1.0, rounds = 10, epsilon = 3.0, delta = 1e-5 }",
    )  # fmt: skip
    for key in _REQUIRED_PLAN_KEYS:
        required(request, key, "protocol.plan")
    arguments: dict[str, Any] = {}
    for key in _PLAN_INTS:
        if key in request:
            arguments[key] = int_field(request[key], f"protocol.plan.{key}")
    for key in _PLAN_NUMBERS:
        if key in request:
            value = request[key]
            arguments[key] = number_field(value, f"protocol.plan.{key}", kind=type_name(value))
    if "neighbouring" in request:
        value = request["neighbouring"]
        if not isinstance(value, str):
            raise ChainFileError(
                f"expected a string, got {type_name(value)}", field="protocol.plan.neighbouring"
            )
        arguments["neighbouring"] = value
    users = arguments.pop("users", policy.min_users)
    check_users(users, policy.min_users, field="protocol.plan.users")
    from cloaknet.fl_accounting import plan_fl  # dp-accounting: loaded only when planning

    try:
        made = plan_fl(
            arguments.pop("dimension"), arguments.pop("clip"), arguments.pop("rounds"),
            arguments.pop("epsilon"), arguments.pop("delta"), users,
            max_users=policy.max_users, **arguments,
        )
    except (ParameterError, InfeasiblePlanError) as exc:
        raise ChainFileError(str(exc), field="protocol.plan") from None
    if not made.meets_target:
        raise ChainFileError(
            f"the plan achieves (ε, δ) = ({made.epsilon_achieved}, {made.delta_achieved}), "
            f"above the target ({made.epsilon}, {made.delta})",
            field="protocol.plan",
        )
    params = made.params()
    _check_fit(params, policy, users_field="protocol.plan.users")
    return VectorChainProtocol(VectorSumProtocol(params, plan=made))


def _check_fit(params: VectorParams, policy: RoundPolicy, *, users_field: str) -> None:
    """:class:`ChainFileError` unless rounds of ``policy`` fit ``params``: privacy planned
    for at most ``[round].min_users`` users, a window for at least ``[round].max_users``."""
    check_users(params.min_users, policy.min_users, field=users_field)
    if params.max_users < policy.max_users:
        raise ChainFileError(
            f"parameters analyze rounds of at most {params.max_users} users, "
            f"but [round].max_users is {policy.max_users}",
            field="protocol.max_users",
        )


# --------------------------------------------------------------------------- writing


def vector_section(params: VectorParams) -> dict[str, Any]:
    """The explicit ``[protocol]`` table of ``params`` (what :func:`read_vector_table`
    reads back to equal parameters): ``name = "vector"`` and
    :meth:`VectorParams.to_json`, with ``modulus`` and ``window`` as decimal strings (exact
    whatever their size).

    :raises TypeError: ``params`` is not a :class:`VectorParams`.
    """
    if not isinstance(params, VectorParams):
        raise TypeError(f"params must be VectorParams, not {type(params).__name__}")
    section: dict[str, Any] = {"name": VECTOR_PROTOCOL}
    section.update(params.to_json())
    section["modulus"] = str(params.modulus)
    section["window"] = str(params.window)
    return section


def vector_plan_section(plan: FLPlan) -> dict[str, Any]:
    """The plan-form ``[protocol]`` table that re-plans ``plan`` when a chain with
    ``[round].min_users = plan.users`` and ``[round].max_users = plan.max_users`` loads it:
    ``dimension``, ``clip``, ``rounds``, ``epsilon``, ``delta``, ``users``, ``scale`` (pinned,
    so the search for it is not redone) and ``beta``, plus ``colluders`` and
    ``neighbouring`` where they are not the defaults.

    :raises ValueError: the table does not re-plan to ``plan``'s parameters (``plan`` was
        made with a non-default ``split_and_mix_share`` or RDP orders, which it does not
        record).
    """
    from cloaknet.fl_accounting import plan_fl

    request: dict[str, Any] = {
        "dimension": plan.dimension,
        "clip": plan.clip,
        "rounds": plan.rounds,
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "users": plan.users,
        "scale": plan.scale,
        "beta": plan.beta,
    }
    if plan.colluders:
        request["colluders"] = plan.colluders
    if plan.neighbouring != "replace":
        request["neighbouring"] = plan.neighbouring
    arguments = {k: v for k, v in request.items() if k not in _REQUIRED_PLAN_KEYS}
    again = plan_fl(
        plan.dimension, plan.clip, plan.rounds, plan.epsilon, plan.delta,
        arguments.pop("users"), max_users=plan.max_users, **arguments,
    )
    if again.params() != plan.params():
        raise ValueError("the plan was made with options the table does not record")
    return {"name": VECTOR_PROTOCOL, "plan": request}
