"""The chain configuration: which nodes form the cascade, and the round policy.

A chain file is TOML::

    [chain]
    id = "demo"                      # [A-Za-z0-9._-]{1,64}
    ownership_proofs = false         # optional: layers after the entry carry proofs

    [[mix]]                          # in chain order; at least one
    name = "mix1"                    # unique among all nodes, [A-Za-z0-9._-]{1,64}
    url = "ws://127.0.0.1:9001"      # ws:// or wss:// with host and port, nothing else
    identity = "<base64 Ed25519 public key>"   # required for every mix

    [sink]                           # the application names this table (sink_table=...)
    name = "sink"
    url = "ws://127.0.0.1:9100"
    identity = "<base64>"            # optional for the sink

    [round]
    min_users = 100                  # >= 1
    max_users = 1000                 # >= min_users
    deadline_seconds = 30.0          # > 0, finite
    below_min = "wait"               # "wait" | "abort"
    chunk_size = 4096                # optional, 1..65536

    [tls]                            # optional: the CA bundle wss:// connections trust
    ca = "ca.pem"                    # PEM; a relative path is relative to the chain file

    [limits]                         # optional; every key optional (mixnet.limits)
    max_connections = 512            # open connections per node, 1..65536
    max_submissions_per_connection = 1000
    idle_seconds = 60.0              # no request in progress this long: connection closed
    handshake_seconds = 10.0         # TLS / websocket opening handshake, each

    [admission]                      # optional: who may submit (mixnet.admission)
    clients = ["<base64 Ed25519 public key>"]  # admitted client keys, and/or
    issuer = "<base64 Ed25519 public key>"     # whose signed tokens admit clients

Any other top-level table (e.g. ``[protocol]``, which belongs to the application) is kept
untouched in :attr:`ChainConfig.sections`. Secret keys never appear in a chain file.

Field paths in error messages use the TOML names with 0-based array indices, so the first
mix is ``mix[0]`` (the hop index of :meth:`ChainConfig.hop_of`).

The ``[round]`` table parses into the mixnet's one policy type,
:class:`mixnet.core.policy.RoundPolicy` (re-exported here). Chain files are written with
:mod:`tomli_w` (:func:`render_chain_config`, :func:`write_chain_config`).

This module is generic: it knows nothing about the application's payloads.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, SupportsIndex, cast
from urllib.parse import urlsplit

from nacl.signing import VerifyKey

from mixnet.admission import ADMISSION_KEYS, Admission, AdmissionError, parse_admission
from mixnet.chain_fields import (
    NAME_PATTERN,
    name_problem,
    policy_type_problem,
    show,
    type_name,
    url_problem,
)
from mixnet.chain_toml import key_text
from mixnet.core.policy import (
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    BelowMin,
    PolicyError,
    RoundPolicy,
)
from mixnet.errors import KeyFileError, MixnetError, clean_reason
from mixnet.keys import parse_public_key
from mixnet.limits import DEFAULT_LIMITS, LIMIT_KEYS, Limits, LimitsError
from mixnet.tls import TlsConfig, TlsError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_LIMITS",
    "DEFAULT_SINK_TABLE",
    "MAX_CHAIN_FILE_SIZE",
    "MAX_CHUNK_SIZE",
    "NAME_PATTERN",
    "RESERVED_SECTIONS",
    "Admission",
    "BelowMin",
    "ChainConfig",
    "ChainConfigError",
    "Limits",
    "NodeInfo",
    "PolicyError",
    "RoundPolicy",
    "TlsConfig",
    "host_port",
    "load_chain_config",
    "name_problem",
    "parse_chain_config",
]

#: Largest chain file read, in bytes.
MAX_CHAIN_FILE_SIZE = 1 << 20
#: Top-level tables this module interprets; every other table goes to ``sections``.
RESERVED_SECTIONS: frozenset[str] = frozenset(
    {"chain", "mix", "round", "tls", "limits", "admission"}
)
#: The TOML table of the node at the end of the chain, unless the application names it.
DEFAULT_SINK_TABLE = "sink"

_CHAIN_KEYS = ("id", "ownership_proofs")
_NODE_KEYS = ("name", "url", "identity")
_ROUND_KEYS = ("min_users", "max_users", "deadline_seconds", "below_min", "chunk_size")
_TLS_KEYS = ("ca",)


# --------------------------------------------------------------------------- the error


def _rebuild_error(problem: str, source: str | None, field: str | None) -> ChainConfigError:
    """Unpickling helper of :class:`ChainConfigError` (keeps its attributes)."""
    return ChainConfigError(problem, source=source, field=field)


class ChainConfigError(MixnetError, ValueError):
    """A chain configuration is unreadable or invalid (code ``"bad-chain-config"``).

    The message is one line ``"<source>: <field path>: <problem>"`` (parts that are unknown
    are left out), e.g. ``chain.toml: mix[2].url: expected ws:// or wss:// URL with host and
    port, got 'http://x'``. The parts are also available as :attr:`source`, :attr:`field`
    and :attr:`problem`. Also a ``ValueError``, so configuration code may catch either.
    """

    code = "bad-chain-config"

    def __init__(
        self, problem: str, *, source: str | None = None, field: str | None = None
    ) -> None:
        self.source = source
        self.field = field
        self.problem = clean_reason(problem)
        super().__init__(": ".join(part for part in (source, field, problem) if part))

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """Pickle/copy with :attr:`source`, :attr:`field` and :attr:`problem` kept."""
        return (_rebuild_error, (self.problem, self.source, self.field))


def host_port(url: str) -> tuple[str, int]:
    """Return ``(host, port)`` of a node URL (an IPv6 host without its brackets).

    The host is lower-cased, as :func:`urllib.parse.urlsplit` gives it. Raises
    :class:`ChainConfigError` (field ``url``) if ``url`` is not a valid node URL.
    """
    problem = url_problem(url)
    if problem is not None:
        raise ChainConfigError(problem, field="url")
    parts = urlsplit(url)
    return cast(str, parts.hostname), cast(int, parts.port)


# --------------------------------------------------------------------------- data classes


@dataclass(frozen=True)
class NodeInfo:
    """One node of the chain: its unique ``name``, its ``url`` and its Ed25519 ``identity``.

    ``url`` is kept exactly as written (see :func:`host_port`). ``identity`` is the node's
    long-term public key; it may be ``None`` only for the sink (:class:`ChainConfig`
    enforces that). Construction validates every field and raises
    :class:`ChainConfigError` whose :attr:`~ChainConfigError.field` is the field's name.
    """

    name: str
    url: str
    identity: VerifyKey | None = None

    def __post_init__(self) -> None:
        problem = name_problem(self.name)
        if problem is not None:
            raise ChainConfigError(problem, field="name")
        problem = url_problem(self.url)
        if problem is not None:
            raise ChainConfigError(problem, field="url")
        if self.identity is not None and not isinstance(self.identity, VerifyKey):
            raise ChainConfigError(
                f"expected a VerifyKey or None, got {type(self.identity).__name__}",
                field="identity",
            )

    @property
    def endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of :attr:`url` (see :func:`host_port`)."""
        return host_port(self.url)


def _frozen_sections(sections: object, reserved: set[str]) -> Mapping[str, Any]:
    """Validate ``sections`` and return a read-only deep copy of it."""
    if not isinstance(sections, Mapping):
        raise ChainConfigError(
            f"expected a mapping of tables, got {type(sections).__name__}", field="sections"
        )
    copied: dict[str, Any] = {}
    for key, value in sections.items():
        if not isinstance(key, str):
            raise ChainConfigError(f"section names must be strings, got {show(key)}")
        if key in reserved:
            raise ChainConfigError("is not an extra section but part of the chain", field=key)
        if not isinstance(value, Mapping):
            raise ChainConfigError(f"expected a table, got {type_name(value)}", field=key)
        copied[key] = copy.deepcopy(dict(value))
    return MappingProxyType(copied)


@dataclass(frozen=True)
class ChainConfig:
    """A whole chain: its id, the mixes in order, the sink (the node after the last mix,
    where the application runs), the round policy, and the other top-level tables of the
    chain file (``sections``, e.g. ``"protocol"``), untouched. ``sink_table`` is the TOML
    name of the sink's table (the application chooses it). ``tls`` is the ``[tls]`` table
    (``None``: ``wss://`` connections trust the system's CAs; :mod:`mixnet.tls`),
    ``limits`` the ``[limits]`` table (:mod:`mixnet.limits`; defaults without one) and
    ``admission`` the ``[admission]`` table (:mod:`mixnet.admission`; ``None``: anyone may
    submit).

    Invariants (checked at construction, :class:`ChainConfigError` with the TOML field path
    otherwise): ``chain_id`` is a valid name; there is at least one mix; every mix has an
    identity key; node names are unique across mixes and sink; no two nodes share a
    host and port; ``sections`` maps str names other than ``chain``, ``mix``, ``round``,
    ``tls``, ``limits``, ``admission`` and ``sink_table`` to tables; ``tls`` is a
    :class:`TlsConfig` or ``None``, ``limits`` a :class:`Limits` and ``admission`` an
    :class:`Admission` or ``None``. ``mixes`` is stored as a tuple and
    ``sections`` as a read-only deep copy (the nested tables are plain dicts: do not mutate
    them). Instances compare by value; the hash leaves ``sections`` out.
    """

    chain_id: str
    mixes: tuple[NodeInfo, ...]
    sink: NodeInfo
    policy: RoundPolicy
    sections: Mapping[str, Any] = field(default_factory=dict, hash=False)
    sink_table: str = DEFAULT_SINK_TABLE
    tls: TlsConfig | None = None
    limits: Limits = DEFAULT_LIMITS
    admission: Admission | None = None
    #: layers after the entry mix's carry ownership proofs (``docs/protocol.md``)
    ownership_proofs: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ownership_proofs, bool):
            raise ChainConfigError(
                f"expected true or false, got {type_name(self.ownership_proofs)}",
                field="chain.ownership_proofs",
            )
        problem = name_problem(self.chain_id)
        if problem is not None:
            raise ChainConfigError(problem, field="chain.id")
        if isinstance(self.mixes, (str, bytes)) or not isinstance(self.mixes, Sequence):
            raise ChainConfigError("expected a sequence of NodeInfo", field="mix")
        mixes = tuple(self.mixes)
        object.__setattr__(self, "mixes", mixes)
        if not mixes:
            raise ChainConfigError("at least one mix is required", field="mix")
        for index, mix in enumerate(mixes):
            if not isinstance(mix, NodeInfo):
                raise ChainConfigError(
                    f"expected a NodeInfo, got {type(mix).__name__}", field=f"mix[{index}]"
                )
            if mix.identity is None:
                raise ChainConfigError(
                    "missing (every mix needs its Ed25519 public key)",
                    field=f"mix[{index}].identity",
                )
        problem = name_problem(self.sink_table)
        if problem is not None or self.sink_table in RESERVED_SECTIONS:
            raise ChainConfigError(
                problem or "is the name of another table", field="sink_table"
            )
        if not isinstance(self.sink, NodeInfo):
            raise ChainConfigError(
                f"expected a NodeInfo, got {type(self.sink).__name__}", field=self.sink_table
            )
        if not isinstance(self.policy, RoundPolicy):
            raise ChainConfigError(
                f"expected a RoundPolicy, got {type(self.policy).__name__}", field="round"
            )
        if self.tls is not None and not isinstance(self.tls, TlsConfig):
            raise ChainConfigError(
                f"expected a TlsConfig or None, got {type(self.tls).__name__}", field="tls"
            )
        if not isinstance(self.limits, Limits):
            raise ChainConfigError(
                f"expected Limits, got {type(self.limits).__name__}", field="limits"
            )
        if self.admission is not None and not isinstance(self.admission, Admission):
            raise ChainConfigError(
                f"expected an Admission or None, got {type(self.admission).__name__}",
                field="admission",
            )
        self._check_unique()
        reserved = {*RESERVED_SECTIONS, self.sink_table}
        object.__setattr__(self, "sections", _frozen_sections(self.sections, reserved))

    def _check_unique(self) -> None:
        """Raise :class:`ChainConfigError` if two nodes share a name or a host and port."""
        names: dict[str, str] = {}
        endpoints: dict[tuple[str, int], str] = {}
        for path, node in self._paths():
            if node.name in names:
                raise ChainConfigError(
                    f"duplicate node name {node.name!r} (also {names[node.name]}.name)",
                    field=f"{path}.name",
                )
            names[node.name] = path
            endpoint = node.endpoint
            if endpoint in endpoints:
                raise ChainConfigError(
                    f"same host and port as {endpoints[endpoint]}.url, got {show(node.url)}",
                    field=f"{path}.url",
                )
            endpoints[endpoint] = path

    def _paths(self) -> list[tuple[str, NodeInfo]]:
        """Every node with its TOML path (``mix[i]`` or the sink's table), in chain order."""
        paths = [(f"mix[{index}]", mix) for index, mix in enumerate(self.mixes)]
        paths.append((self.sink_table, self.sink))
        return paths

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """All nodes in chain order: the mixes, then the sink."""
        return (*self.mixes, self.sink)

    def node(self, name: str) -> NodeInfo:
        """The node called ``name``; :class:`ChainConfigError` if there is none."""
        return self.nodes[self.hop_of(name)]

    def hop_of(self, name: str) -> int:
        """The position of node ``name``: its index among the mixes (0 for the entry mix),
        or ``len(mixes)`` for the sink. :class:`ChainConfigError` if unknown."""
        for index, node in enumerate(self.nodes):
            if node.name == name:
                return index
        known = ", ".join(node.name for node in self.nodes)
        raise ChainConfigError(f"unknown node {show(name)}; the chain has: {known}")

    def successor(self, name: str) -> NodeInfo | None:
        """The node after ``name`` (the sink after the last mix), or ``None`` after the
        sink. :class:`ChainConfigError` if ``name`` is unknown."""
        hop = self.hop_of(name)
        nodes = self.nodes
        return nodes[hop + 1] if hop + 1 < len(nodes) else None


# --------------------------------------------------------------------------- parsing


def load_chain_config(
    path: str | os.PathLike[str], *, sink_table: str = DEFAULT_SINK_TABLE
) -> ChainConfig:
    """Read and validate the chain file at ``path`` (see the module docstring); the sink's
    table is ``[<sink_table>]``.

    Raises :class:`ChainConfigError` with a one-line message starting with ``path`` if the
    file cannot be read, is larger than :data:`MAX_CHAIN_FILE_SIZE` bytes, is not UTF-8,
    is not valid TOML (tomllib's message, with line and column), or does not describe a
    valid chain (see :func:`parse_chain_config`). A relative ``[tls].ca`` is taken relative
    to the chain file's directory, and the CA bundle must be readable and hold at least one
    certificate (field ``tls.ca`` otherwise).
    """
    source = os.fspath(path)
    base = Path(os.path.abspath(source)).parent
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CHAIN_FILE_SIZE + 1)
    except OSError as exc:
        raise ChainConfigError(f"cannot read chain file: {exc.strerror}", source=source) from None
    if len(raw) > MAX_CHAIN_FILE_SIZE:
        raise ChainConfigError(
            f"chain file is larger than {MAX_CHAIN_FILE_SIZE} bytes", source=source
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ChainConfigError("chain file is not UTF-8 text", source=source) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ChainConfigError(f"invalid TOML: {exc}", source=source) from None
    config = parse_chain_config(data, source=source, sink_table=sink_table, base=base)
    if config.tls is not None:
        try:
            config.tls.client_context()
        except TlsError as exc:
            raise ChainConfigError(exc.reason, source=source, field="tls.ca") from None
    return config


def parse_chain_config(
    data: Mapping[str, Any],
    *,
    source: str,
    sink_table: str = DEFAULT_SINK_TABLE,
    base: Path | None = None,
) -> ChainConfig:
    """Validate a parsed chain file ``data`` (as :mod:`tomllib` returns it).

    ``source`` names where ``data`` came from, for messages. Rejects missing tables and
    fields, unknown keys in ``[chain]``, ``[[mix]]``, the sink's table and ``[round]``,
    top-level keys that are not tables, values of the wrong TOML type (a boolean is not an
    integer; ``deadline_seconds`` may be an integer or a float), invalid names, URLs and
    public keys, out-of-range policy values, out-of-range ``[limits]``, a ``[tls]`` table
    without ``ca``, an ``[admission]`` table with unknown keys, keys that are not Ed25519
    public keys, a repeated client key or no one admitted, duplicate node names and
    duplicate host:port pairs. A relative
    ``[tls].ca`` is joined to ``base`` (when given; the CA file itself is not read here).
    Raises :class:`ChainConfigError` with ``source`` and the field path.
    """
    if not isinstance(data, Mapping):
        raise ChainConfigError(f"expected a table, got {type_name(data)}", source=source)
    try:
        return _parse(data, sink_table, base)
    except ChainConfigError as exc:
        raise ChainConfigError(exc.problem, source=source, field=exc.field) from None


def _table(data: Mapping[str, Any], key: str, allowed: Sequence[str]) -> Mapping[str, Any]:
    """Return ``data[key]``, which must be a table with no keys outside ``allowed``."""
    if key not in data:
        raise ChainConfigError(f"missing table [{key}]", field=key)
    return _keys_checked(data[key], key, allowed)


def _keys_checked(value: object, path: str, allowed: Sequence[str]) -> Mapping[str, Any]:
    """Return ``value`` if it is a table whose keys are all in ``allowed``."""
    if not isinstance(value, Mapping):
        raise ChainConfigError(f"expected a table, got {type_name(value)}", field=path)
    for key in value:
        if key not in allowed:
            raise ChainConfigError(
                f"unknown key (allowed: {', '.join(allowed)})", field=f"{path}.{key_text(key)}"
            )
    return value


def _required(table: Mapping[str, Any], key: str, path: str) -> object:
    """``table[key]``; :class:`ChainConfigError` naming ``path.key`` if it is missing."""
    if key not in table:
        raise ChainConfigError("missing", field=f"{path}.{key}")
    return table[key]


def _typed_str(value: object, path: str) -> str:
    """``value`` if it is a str; else :class:`ChainConfigError` naming ``path``."""
    if not isinstance(value, str):
        raise ChainConfigError(f"expected a string, got {type_name(value)}", field=path)
    return value


def _parse_node(value: object, path: str, *, identity_required: bool) -> NodeInfo:
    """Parse one ``[[mix]]`` or the sink's table found at ``path``."""
    table = _keys_checked(value, path, _NODE_KEYS)
    name = _typed_str(_required(table, "name", path), f"{path}.name")
    url = _typed_str(_required(table, "url", path), f"{path}.url")
    identity: VerifyKey | None = None
    if "identity" in table:
        text = _typed_str(table["identity"], f"{path}.identity")
        try:
            identity = parse_public_key(text)
        except KeyFileError as exc:
            raise ChainConfigError(
                f"not an Ed25519 public key ({exc.reason})", field=f"{path}.identity"
            ) from None
    elif identity_required:
        raise ChainConfigError(
            "missing (every mix needs its Ed25519 public key)", field=f"{path}.identity"
        )
    try:
        return NodeInfo(name=name, url=url, identity=identity)
    except ChainConfigError as exc:
        raise ChainConfigError(exc.problem, field=f"{path}.{exc.field}") from None


def _parse_policy(data: Mapping[str, Any]) -> RoundPolicy:
    """Parse the ``[round]`` table; a :class:`PolicyError` becomes a
    :class:`ChainConfigError` with field ``round.<field>``."""
    table = _table(data, "round", _ROUND_KEYS)
    values = {
        key: _required(table, key, "round")
        if key != "chunk_size"
        else table.get(key, DEFAULT_CHUNK_SIZE)
        for key in _ROUND_KEYS
    }
    for key, value in values.items():
        problem = policy_type_problem(key, value)
        if problem is not None:
            raise ChainConfigError(problem, field=f"round.{key}")
    try:
        return RoundPolicy(
            min_users=cast(int, values["min_users"]),
            max_users=cast(int, values["max_users"]),
            deadline_seconds=cast(float, values["deadline_seconds"]),
            below_min=cast(BelowMin, values["below_min"]),
            chunk_size=cast(int, values["chunk_size"]),
        )
    except PolicyError as exc:
        raise ChainConfigError(exc.problem, field=f"round.{exc.field}") from None


def _parse_tls(data: Mapping[str, Any], base: Path | None) -> TlsConfig | None:
    """Parse the optional ``[tls]`` table."""
    if "tls" not in data:
        return None
    table = _table(data, "tls", _TLS_KEYS)
    ca = _typed_str(_required(table, "ca", "tls"), "tls.ca")
    if not ca or "\0" in ca:
        raise ChainConfigError(f"expected a file path, got {show(ca)}", field="tls.ca")
    path = Path(ca)
    if base is not None and not path.is_absolute():
        path = base / path
    return TlsConfig(ca=path)


def _parse_limits(data: Mapping[str, Any]) -> Limits:
    """Parse the optional ``[limits]`` table (missing keys take their defaults)."""
    if "limits" not in data:
        return DEFAULT_LIMITS
    table = _table(data, "limits", LIMIT_KEYS)
    try:
        return Limits(**{key: table[key] for key in LIMIT_KEYS if key in table})
    except LimitsError as exc:
        raise ChainConfigError(exc.problem, field=f"limits.{exc.field}") from None


def _parse_admission(data: Mapping[str, Any]) -> Admission | None:
    """Parse the optional ``[admission]`` table (``None`` without one: admission is off)."""
    if "admission" not in data:
        return None
    table = _table(data, "admission", ADMISSION_KEYS)
    try:
        return parse_admission(table)
    except AdmissionError as exc:
        path = f"admission.{exc.field}" if exc.field else "admission"
        raise ChainConfigError(exc.problem, field=path) from None


def _parse(data: Mapping[str, Any], sink_table: str, base: Path | None = None) -> ChainConfig:
    """:func:`parse_chain_config` without the ``source`` (errors carry field paths)."""
    chain = _table(data, "chain", _CHAIN_KEYS)
    chain_id = _typed_str(_required(chain, "id", "chain"), "chain.id")
    if "mix" not in data:
        raise ChainConfigError("missing (at least one [[mix]] table is required)", field="mix")
    mix_list = data["mix"]
    if not isinstance(mix_list, list):
        raise ChainConfigError(
            f"expected an array of [[mix]] tables, got {type_name(mix_list)}", field="mix"
        )
    mixes = tuple(
        _parse_node(item, f"mix[{index}]", identity_required=True)
        for index, item in enumerate(mix_list)
    )
    if sink_table not in data:
        raise ChainConfigError(f"missing table [{sink_table}]", field=sink_table)
    sink = _parse_node(data[sink_table], sink_table, identity_required=False)
    policy = _parse_policy(data)
    tls = _parse_tls(data, base)
    limits = _parse_limits(data)
    admission = _parse_admission(data)
    sections: dict[str, Any] = {}
    for key, value in data.items():
        if key in RESERVED_SECTIONS or key == sink_table:
            continue
        if not isinstance(value, dict):
            raise ChainConfigError(
                f"unknown top-level key; expected a table, got {type_name(value)}",
                field=key_text(key),
            )
        sections[key] = value
    return ChainConfig(
        chain_id=chain_id,
        mixes=mixes,
        sink=sink,
        policy=policy,
        sections=sections,
        sink_table=sink_table,
        tls=tls,
        limits=limits,
        admission=admission,
        ownership_proofs=chain.get("ownership_proofs", False),
    )
