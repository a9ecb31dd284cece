"""cloaknet's view of a chain file: the generic chain (:mod:`mixnet.chain`) plus ``[protocol]``.

The ``[protocol]`` table holds either the explicit parameters, as :func:`protocol_section`
writes them::

    [protocol]
    mode = "single-user"             # or "sum-preserving"
    messages = 49
    modulus = "6823978027"           # decimal string (N may exceed 64 bits); an int is accepted
    precision = 100000
    max_users = 1000                 # optional; default [round].max_users; must be >= it
    noise_scale = "208333/1"         # exact fractions "num/den" (or integers), single-user only
    noise_q = "81028/43980465111"

(plus the informational keys ``users``, ``colluders``, ``epsilon``, ``delta``, ``gamma`` and
``bound`` that a plan adds; they are ignored, except that ``users`` may not exceed
``[round].min_users``), or a request to plan them when the file is loaded::

    [protocol]
    plan = { users = 1000, epsilon = 1.0, delta = 1e-6, mode = "single-user" }

where ``plan`` takes the arguments of :func:`cloaknet.planner.plan` (``users`` defaults to
``[round].min_users``; ``max_users`` is always ``[round].max_users``).

A third form runs one of the comparison protocols of :mod:`cloaknet.protocols` through the
chain instead of the cloak (the chain carries their fixed-width messages and the analyzer node
calls the protocol's analyzer)::

    [protocol]
    name = "bbgn"                    # "blanket", "cheu" or "bbgn"
    users = 1000                     # n: these protocols are planned for a fixed round size,
    epsilon = 1.0                    #    so [round].min_users = [round].max_users = users
    delta = 1e-6
    # colluders = 0, precision = ... (optional, as make_protocol takes them)

Privacy is planned for ``users`` users and a round never closes with fewer than
``[round].min_users``, so ``users <= min_users`` is required; the analyzer must handle the
largest round, so the parameters' ``max_users`` must be at least ``[round].max_users``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from nacl.signing import VerifyKey

from cloaknet import planner
from cloaknet.errors import CloakError, InfeasiblePlanError, ParameterError
from cloaknet.params import MODES, CloakParams, NoiseParams
from cloaknet.planner import BOUNDS, Plan
from cloaknet.protocols import SummationProtocol, make_protocol
from mixnet.chain import (
    ChainConfig,
    ChainConfigError,
    load_chain_config,
    name_problem,
    write_chain_config,
)
from mixnet.errors import KeyFileError
from mixnet.keys import generate_identity, write_key_file

__all__ = [
    "CHAIN_PROTOCOLS",
    "ChainFileError",
    "CloakChain",
    "chain_from_config",
    "generate_node_keys",
    "load_chain",
    "protocol_section",
    "write_chain_file",
]

#: The ``[protocol]`` keys that define the parameters.
_EXPLICIT_KEYS = (
    "mode",
    "messages",
    "modulus",
    "precision",
    "max_users",
    "noise_scale",
    "noise_q",
)
#: Keys a plan adds for people to read; ignored when loading (``users`` is checked).
_INFO_KEYS = ("users", "colluders", "epsilon", "delta", "gamma", "bound")
#: Arguments of ``[protocol].plan`` (those of :func:`cloaknet.planner.plan`).
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
_DIGITS = re.compile(r"[0-9]+")
_FRACTION = re.compile(r"([0-9]+)(?:/([0-9]+))?")
_SHOWN_VALUE_LENGTH = 60


class ChainFileError(CloakError, ValueError):
    """A chain file cannot be read, written or used by cloaknet.

    The message is one line ``"<source>: <field path>: <problem>"`` (unknown parts left
    out), e.g. ``chain.toml: protocol.noise_scale: expected an exact fraction string like
    "208333/1", got float``. Errors of the generic chain (:class:`~mixnet.chain.ChainConfigError`)
    and of the planner or :class:`~cloaknet.params.CloakParams` are wrapped into this type,
    keeping their reason. The parts are also available as :attr:`source`, :attr:`field`
    and :attr:`problem`.
    """

    def __init__(
        self, problem: str, *, source: str | None = None, field: str | None = None
    ) -> None:
        self.source = source
        self.field = field
        self.problem = _one_line(problem)
        super().__init__(
            _one_line(": ".join(part for part in (source, field, self.problem) if part))
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle/copy with :attr:`source`, :attr:`field` and :attr:`problem` kept."""
        return (_rebuild_error, (self.problem, self.source, self.field))


def _rebuild_error(problem: str, source: str | None, field: str | None) -> ChainFileError:
    """Unpickling helper of :class:`ChainFileError`."""
    return ChainFileError(problem, source=source, field=field)


def _one_line(text: str) -> str:
    """``text`` with every non-printable character (newlines included) made a space."""
    return "".join(char if char.isprintable() else " " for char in text).strip()


def _from_config_error(exc: ChainConfigError) -> ChainFileError:
    """The :class:`ChainFileError` carrying the parts of a generic chain error."""
    return ChainFileError(exc.problem, source=exc.source, field=exc.field)


def _show(value: object) -> str:
    """``repr(value)``, shortened for messages."""
    text = repr(value)
    if len(text) > _SHOWN_VALUE_LENGTH:
        text = text[: _SHOWN_VALUE_LENGTH - 3] + "..."
    return text


def _type_name(value: object) -> str:
    """The TOML name of ``value``'s type."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table"}
    return names.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- the chain


@dataclass(frozen=True)
class CloakChain:
    """A chain file as cloaknet uses it: the generic chain, the protocol parameters, and the
    plan that produced them (``None`` unless the file asked for planning at load time).

    Usually the chain runs the cloak (``params``); a chain file with ``[protocol].name`` runs
    a comparison protocol instead (``protocol``, and ``params`` is ``None``).

    Invariants (checked at construction, :class:`ChainFileError` otherwise): exactly one of
    ``params`` and ``protocol``; ``params.max_users >= config.policy.max_users``; when
    ``plan`` is given, ``plan.params == params`` and ``plan.users <= config.policy.min_users``;
    a ``protocol`` is planned for exactly ``min_users == max_users`` users.
    """

    config: ChainConfig
    params: CloakParams | None
    plan: Plan | None = None
    protocol: SummationProtocol | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config, ChainConfig):
            raise TypeError(f"config must be a ChainConfig, not {type(self.config).__name__}")
        if (self.params is None) == (self.protocol is None):
            raise TypeError("a chain runs either the cloak (params) or a protocol, not both")
        if self.protocol is not None:
            _check_protocol_policy(self.config, self.protocol, source=None)
            return
        if not isinstance(self.params, CloakParams):
            raise TypeError(f"params must be CloakParams, not {type(self.params).__name__}")
        _check_against_policy(self.config, self.params, self.plan, source=None)

    @property
    def messages(self) -> int:
        """m, the number of payloads every client submits."""
        if self.protocol is not None:
            return int(self.protocol.messages_per_user)
        assert self.params is not None
        return self.params.messages

    @property
    def payload_length(self) -> int:
        """Bytes of one plaintext payload (one fixed-width share or message)."""
        if self.protocol is not None:
            return self.protocol.bytes_per_message
        assert self.params is not None
        return self.params.share_bytes

    @property
    def message_modulus(self) -> int:
        """Payloads are integers in [0, message_modulus)."""
        if self.protocol is not None:
            return self.protocol.message_modulus
        assert self.params is not None
        return self.params.modulus

    def cloak(self) -> CloakParams:
        """The cloak's parameters; :class:`ChainFileError` if the chain runs another protocol."""
        if self.params is None:
            raise ChainFileError(
                "this chain runs a comparison protocol, not the cloak", field="protocol.name"
            )
        return self.params


#: Comparison protocols a chain can run by name (the rest of :data:`PROTOCOLS` are the cloak
#: itself, planned by the explicit or ``plan`` forms, and the trusted curator).
CHAIN_PROTOCOLS = ("blanket", "cheu", "bbgn")
_NAMED_KEYS = ("name", "users", "epsilon", "delta", "colluders", "precision")


def _check_protocol_policy(
    config: ChainConfig, protocol: SummationProtocol, *, source: str | None
) -> None:
    policy = config.policy
    if not policy.min_users == policy.max_users == protocol.users:
        raise ChainFileError(
            f"protocol {protocol.name!r} is planned for exactly {protocol.users} users; set "
            f"[round].min_users = [round].max_users = {protocol.users} "
            f"(they are {policy.min_users} and {policy.max_users})",
            source=source,
            field="protocol.users",
        )
    if protocol.messages_per_user != int(protocol.messages_per_user):
        raise ChainFileError(
            "the protocol's message count must be a whole number",
            source=source,
            field="protocol.name",
        )


def _named(protocol: Mapping[str, Any], config: ChainConfig) -> SummationProtocol:
    name = protocol["name"]
    if name not in CHAIN_PROTOCOLS:
        raise ChainFileError(
            f"unknown protocol {_show(name)} (chains run: {', '.join(CHAIN_PROTOCOLS)}, or "
            "the cloak via plan = {...} or explicit parameters)",
            field="protocol.name",
        )
    for key in protocol:
        if key not in _NAMED_KEYS:
            raise ChainFileError(
                f"unknown key for protocol {name!r} (allowed: {', '.join(_NAMED_KEYS)})",
                field=f"protocol.{key}",
            )
    users = _int(_required(protocol, "users", "protocol"), "protocol.users")
    options = {
        key: _int(protocol[key], f"protocol.{key}")
        for key in ("colluders", "precision")
        if key in protocol
    }
    values = []
    for key in ("epsilon", "delta"):
        value = _required(protocol, key, "protocol")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ChainFileError(f"expected a number, got {_show(value)}", field=f"protocol.{key}")
        values.append(float(value))
    try:
        return make_protocol(name, users, values[0], values[1], **options)
    except (ParameterError, InfeasiblePlanError) as exc:
        raise ChainFileError(str(exc), field="protocol") from None


def _check_against_policy(
    config: ChainConfig, params: CloakParams, plan_: Plan | None, *, source: str | None
) -> None:
    """Raise :class:`ChainFileError` unless ``params``/``plan_`` fit ``config``'s policy."""
    policy = config.policy
    if params.max_users < policy.max_users:
        raise ChainFileError(
            f"parameters analyze rounds of at most {params.max_users} users, "
            f"but [round].max_users is {policy.max_users}",
            source=source,
            field="protocol.max_users",
        )
    if plan_ is None:
        return
    if not isinstance(plan_, Plan):
        raise TypeError(f"plan must be a Plan or None, not {type(plan_).__name__}")
    if plan_.params != params:
        raise ChainFileError(
            "the plan's parameters differ from params", source=source, field="protocol"
        )
    _check_users(plan_.users, policy.min_users, source=source, field="protocol.plan.users")


def _check_users(users: int, min_users: int, *, source: str | None, field: str) -> None:
    """:class:`ChainFileError` if privacy was planned for more users than ``min_users``."""
    if users > min_users:
        raise ChainFileError(
            f"privacy is planned for {users} users, but rounds may close with "
            f"[round].min_users = {min_users}; must be <= {min_users}",
            source=source,
            field=field,
        )


# --------------------------------------------------------------------------- loading


def load_chain(path: str | os.PathLike[str]) -> CloakChain:
    """Load the chain file at ``path`` and its ``[protocol]`` (see the module docstring).

    A ``plan = {...}`` request runs the planner (``max_users`` = ``[round].max_users``) and
    keeps its :class:`~cloaknet.planner.Plan`. Raises :class:`ChainFileError` with a
    one-line message naming ``path`` and the field for every problem: the generic chain's
    (wrapped :class:`~mixnet.chain.ChainConfigError`), a missing or invalid ``[protocol]``,
    parameters that :class:`~cloaknet.params.CloakParams` or the planner reject (their
    reason kept), and parameters that do not fit ``[round]``.
    """
    try:
        config = load_chain_config(path)
    except ChainConfigError as exc:
        raise _from_config_error(exc) from exc
    return chain_from_config(config, source=os.fspath(path))


def chain_from_config(config: ChainConfig, *, source: str = "<chain>") -> CloakChain:
    """Interpret ``config.sections["protocol"]`` and return the :class:`CloakChain`.

    ``source`` names the configuration in messages. Raises :class:`ChainFileError` as
    :func:`load_chain` does, ``TypeError`` if ``config`` is not a ``ChainConfig``.
    """
    if not isinstance(config, ChainConfig):
        raise TypeError(f"config must be a ChainConfig, not {type(config).__name__}")
    try:
        protocol = config.sections.get("protocol")
        if protocol is None:
            raise ChainFileError("missing table [protocol]", field="protocol")
        if "name" in protocol:
            named = _named(protocol, config)
            _check_protocol_policy(config, named, source=None)
            return CloakChain(config=config, params=None, protocol=named)
        for key in protocol:
            if key not in (*_EXPLICIT_KEYS, *_INFO_KEYS, "plan"):
                raise ChainFileError(
                    "unknown key (allowed: plan, or the explicit parameters "
                    f"{', '.join(_EXPLICIT_KEYS)})",
                    field=f"protocol.{key}",
                )
        if "plan" in protocol:
            made = _planned(protocol, config)
            params = made.params
        else:
            made = None
            params = _explicit(protocol, config)
        _check_against_policy(config, params, made, source=None)
    except ChainFileError as exc:
        raise ChainFileError(exc.problem, source=source, field=exc.field) from None
    return CloakChain(config=config, params=params, plan=made)


def _int(value: object, path: str) -> int:
    """``value`` if it is an int (not a bool); else :class:`ChainFileError` naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChainFileError(f"expected an integer, got {_type_name(value)}", field=path)
    return value


def _required(table: Mapping[str, Any], key: str, path: str) -> Any:
    """``table[key]``; :class:`ChainFileError` naming ``path.key`` if missing."""
    if key not in table:
        raise ChainFileError("missing", field=f"{path}.{key}")
    return table[key]


def _planned(protocol: Mapping[str, Any], config: ChainConfig) -> Plan:
    """Run the planner as ``protocol.plan`` asks."""
    for key in protocol:
        if key in _EXPLICIT_KEYS:
            raise ChainFileError(
                "explicit parameters are not allowed together with protocol.plan",
                field=f"protocol.{key}",
            )
    request = protocol["plan"]
    if not isinstance(request, Mapping):
        raise ChainFileError(
            f"expected a table like {{ epsilon = 1.0, delta = 1e-6 }}, got {_type_name(request)}",
            field="protocol.plan",
        )
    for key in request:
        if key == "max_users":
            raise ChainFileError(
                "not allowed: the plan's max_users is always [round].max_users",
                field="protocol.plan.max_users",
            )
        if key not in _PLAN_KEYS:
            raise ChainFileError(
                f"unknown key (allowed: {', '.join(_PLAN_KEYS)})", field=f"protocol.plan.{key}"
            )
    policy = config.policy
    arguments: dict[str, Any] = {}
    for key in ("users", "precision", "colluders", "max_messages"):
        if key in request:
            arguments[key] = _int(request[key], f"protocol.plan.{key}")
    for key in ("epsilon", "delta", "max_rmse"):
        if key not in request:
            if key != "max_rmse":
                raise ChainFileError("missing", field=f"protocol.plan.{key}")
            continue
        value = request[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ChainFileError(
                f"expected a number, got {_type_name(value)}", field=f"protocol.plan.{key}"
            )
        arguments[key] = float(value)
    for key in ("mode", "bound"):
        if key in request:
            value = request[key]
            allowed = MODES if key == "mode" else BOUNDS
            if not isinstance(value, str) or value not in allowed:
                raise ChainFileError(
                    f"expected one of {', '.join(allowed)}, got {_show(value)}",
                    field=f"protocol.plan.{key}",
                )
            arguments[key] = value
    users = arguments.pop("users", policy.min_users)
    _check_users(users, policy.min_users, source=None, field="protocol.plan.users")
    try:
        return planner.plan(
            users,
            arguments.pop("epsilon"),
            arguments.pop("delta"),
            max_users=policy.max_users,
            **arguments,
        )
    except (ParameterError, InfeasiblePlanError) as exc:
        raise ChainFileError(str(exc), field="protocol.plan") from None


def _modulus(value: object) -> int:
    """``[protocol].modulus``: a decimal digit string or an int."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ChainFileError(
            f"expected a decimal string (or an integer), got {_type_name(value)}",
            field="protocol.modulus",
        )
    if isinstance(value, int):
        return value
    if not _DIGITS.fullmatch(value):
        raise ChainFileError(
            f"expected a decimal string of digits, got {_show(value)}", field="protocol.modulus"
        )
    try:
        return int(value)
    except ValueError:  # beyond the interpreter's limit on digits
        raise ChainFileError(f"too many digits ({len(value)})", field="protocol.modulus") from None


def _fraction(value: object, path: str) -> Fraction:
    """An exact rational from a ``"num/den"`` or ``"num"`` string or an int; floats refused."""
    if isinstance(value, float):
        raise ChainFileError(
            'expected an exact fraction string like "208333/1", got float (inexact)', field=path
        )
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ChainFileError(
            f'expected an exact fraction string like "208333/1", got {_type_name(value)}',
            field=path,
        )
    if isinstance(value, int):
        return Fraction(value)
    match = _FRACTION.fullmatch(value)
    if match is None:
        raise ChainFileError(
            f'expected an exact fraction string like "208333/1", got {_show(value)}', field=path
        )
    try:
        numerator = int(match.group(1))
        denominator = int(match.group(2)) if match.group(2) is not None else 1
        return Fraction(numerator, denominator)
    except ZeroDivisionError:
        raise ChainFileError(f"zero denominator in {_show(value)}", field=path) from None
    except ValueError:  # beyond the interpreter's limit on digits
        raise ChainFileError(f"too many digits in {_show(value)}", field=path) from None


def _noise(protocol: Mapping[str, Any]) -> NoiseParams:
    """The single-user noise parameters of the explicit ``[protocol]``."""
    scale = _fraction(_required(protocol, "noise_scale", "protocol"), "protocol.noise_scale")
    q = _fraction(_required(protocol, "noise_q", "protocol"), "protocol.noise_q")
    try:
        NoiseParams(scale=scale, q=Fraction(1))
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol.noise_scale") from None
    try:
        return NoiseParams(scale=scale, q=q)
    except ParameterError as exc:
        raise ChainFileError(str(exc), field="protocol.noise_q") from None


def _explicit(protocol: Mapping[str, Any], config: ChainConfig) -> CloakParams:
    """The explicit parameters of ``[protocol]``."""
    mode = _required(protocol, "mode", "protocol")
    if not isinstance(mode, str) or mode not in MODES:
        raise ChainFileError(
            f"expected one of {', '.join(MODES)}, got {_show(mode)}", field="protocol.mode"
        )
    messages = _int(_required(protocol, "messages", "protocol"), "protocol.messages")
    precision = _int(_required(protocol, "precision", "protocol"), "protocol.precision")
    modulus = _modulus(_required(protocol, "modulus", "protocol"))
    max_users = config.policy.max_users
    if "max_users" in protocol:
        max_users = _int(protocol["max_users"], "protocol.max_users")
    if "users" in protocol:
        users = _int(protocol["users"], "protocol.users")
        _check_users(users, config.policy.min_users, source=None, field="protocol.users")
    noise: NoiseParams | None = None
    if mode == "single-user":
        noise = _noise(protocol)
    else:
        for key in ("noise_scale", "noise_q"):
            if key in protocol:
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
    return params


# --------------------------------------------------------------------------- writing


def _fraction_text(value: Fraction) -> str:
    """``value`` as ``"num/den"`` (always with a denominator)."""
    return f"{value.numerator}/{value.denominator}"


def protocol_section(params: CloakParams, plan: Plan | None = None) -> dict[str, Any]:
    """The explicit ``[protocol]`` table for ``params`` (what :func:`load_chain` reads back).

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


def write_chain_file(
    path: str | os.PathLike[str],
    config: ChainConfig,
    params: CloakParams | Mapping[str, Any],
    plan: Plan | None = None,
    *,
    overwrite: bool = False,
) -> None:
    """Write a chain file: ``config`` with ``[protocol]`` = ``protocol_section(params, plan)``
    (or ``params`` itself when it is a mapping: e.g. a named comparison protocol's table).

    Any ``protocol`` section already in ``config.sections`` is replaced; other sections are
    kept. The result is checked as :func:`load_chain` would check it before anything is
    written, so the file always loads back (to the same config and params). Without
    ``overwrite`` an existing file is never touched; with it the file is replaced
    atomically. Raises :class:`ChainFileError` naming ``path`` if the parameters do not fit
    ``config`` (e.g. ``params.max_users < [round].max_users``), if the file exists and
    ``overwrite`` is false, or if it cannot be written; ``TypeError``/``ValueError`` as
    :func:`protocol_section` does.
    """
    source = os.fspath(path)
    table = dict(params) if isinstance(params, Mapping) else protocol_section(params, plan)
    sections = {**config.sections, "protocol": table}
    try:
        complete = dataclasses.replace(config, sections=sections)
    except ChainConfigError as exc:
        raise _from_config_error(exc) from exc
    chain_from_config(complete, source=source)
    try:
        write_chain_config(path, complete, overwrite=overwrite)
    except ChainConfigError as exc:
        raise _from_config_error(exc) from exc


def generate_node_keys(
    directory: str | os.PathLike[str], names: Iterable[str], *, overwrite: bool = False
) -> dict[str, VerifyKey]:
    """Make a fresh identity key per node and write it to ``<directory>/<name>.key``.

    Creates ``directory`` (mode 0700) if needed; each key file is written by
    :func:`mixnet.keys.write_key_file` (mode 0600). Returns ``{name: public key}`` in the
    order of ``names``. All names are checked, and (without ``overwrite``) no key file may
    exist yet, before anything is written; if writing fails midway (without ``overwrite``)
    the files written by this call are removed. Raises :class:`ChainFileError` for an
    invalid or repeated name (names follow the chain file's rule, ``[A-Za-z0-9._-]{1,64}``),
    an existing key file (without ``overwrite``) or a write failure.
    """
    folder = Path(directory)
    wanted = list(names)
    seen: set[str] = set()
    for name in wanted:
        problem = name_problem(name)
        if problem is not None:
            raise ChainFileError(f"node name: {problem}", source=os.fspath(folder))
        if name in seen:
            raise ChainFileError(f"node name {name!r} is repeated", source=os.fspath(folder))
        seen.add(name)
    paths = {name: folder / f"{name}.key" for name in wanted}
    if not overwrite:
        for path in paths.values():
            if os.path.lexists(path):
                raise ChainFileError(
                    "key file already exists; refusing to overwrite it", source=os.fspath(path)
                )
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ChainFileError(
            f"cannot create key directory: {exc.strerror}", source=os.fspath(folder)
        ) from None
    public: dict[str, VerifyKey] = {}
    written: list[Path] = []
    try:
        for name, path in paths.items():
            identity = generate_identity()
            write_key_file(path, identity, name=name, overwrite=overwrite)
            written.append(path)
            public[name] = identity.verify_key
    except KeyFileError as exc:
        if not overwrite:
            for path in written:
                path.unlink(missing_ok=True)
        raise ChainFileError(exc.reason) from exc
    return public
