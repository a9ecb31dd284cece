"""The chain configuration: which nodes form the cascade, and the round policy.

A chain file is TOML::

    [chain]
    id = "demo"                      # [A-Za-z0-9._-]{1,64}

    [[mix]]                          # in chain order; at least one
    name = "mix1"                    # unique among all nodes, [A-Za-z0-9._-]{1,64}
    url = "ws://127.0.0.1:9001"      # ws:// or wss:// with host and port, nothing else
    identity = "<base64 Ed25519 public key>"   # required for every mix

    [analyzer]
    name = "analyzer"
    url = "ws://127.0.0.1:9100"
    identity = "<base64>"            # optional for the analyzer

    [round]
    min_users = 100                  # >= 1
    max_users = 1000                 # >= min_users
    deadline_seconds = 30.0          # > 0, finite
    below_min = "wait"               # "wait" | "abort"
    chunk_size = 4096                # optional, 1..65536

Any other top-level table (e.g. ``[protocol]``, which belongs to the application) is kept
untouched in :attr:`ChainConfig.sections`. Secret keys never appear in a chain file.

Field paths in error messages use the TOML names with 0-based array indices, so the first
mix is ``mix[0]`` (the hop index of :meth:`ChainConfig.hop_of`).

This module is generic: it knows nothing about the application's payloads.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import math
import os
import re
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, SupportsIndex, cast
from urllib.parse import urlsplit

from nacl.signing import VerifyKey

from mixnet.errors import KeyFileError, MixnetError, clean_reason
from mixnet.keys import parse_public_key, public_key_text

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "MAX_CHAIN_FILE_SIZE",
    "MAX_CHUNK_SIZE",
    "NAME_PATTERN",
    "RESERVED_SECTIONS",
    "BelowMin",
    "ChainConfig",
    "ChainConfigError",
    "NodeInfo",
    "RoundPolicy",
    "host_port",
    "load_chain_config",
    "name_problem",
    "parse_chain_config",
    "render_chain_config",
    "write_chain_config",
]

BelowMin = Literal["wait", "abort"]
_BELOW_MIN: tuple[BelowMin, ...] = ("wait", "abort")

#: Payloads per batch frame between nodes, unless the chain file says otherwise.
DEFAULT_CHUNK_SIZE = 4096
#: Largest allowed ``[round].chunk_size``.
MAX_CHUNK_SIZE = 65536
#: Largest chain file read, in bytes.
MAX_CHAIN_FILE_SIZE = 1 << 20
#: Chain ids and node names: 1 to 64 characters from ``[A-Za-z0-9._-]``.
NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Top-level tables this module interprets; every other table goes to ``sections``.
RESERVED_SECTIONS: frozenset[str] = frozenset({"chain", "mix", "analyzer", "round"})

_CHAIN_KEYS = ("id",)
_NODE_KEYS = ("name", "url", "identity")
_ROUND_KEYS = ("min_users", "max_users", "deadline_seconds", "below_min", "chunk_size")
_URL_EXPECTED = "expected ws:// or wss:// URL with host and port"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHOWN_VALUE_LENGTH = 60
_INT64_MAX = (1 << 63) - 1


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


def _show(value: object) -> str:
    """``repr(value)``, shortened so that a hostile value cannot flood a message."""
    text = repr(value)
    if len(text) > _SHOWN_VALUE_LENGTH:
        text = text[: _SHOWN_VALUE_LENGTH - 3] + "..."
    return text


def _type_name(value: object) -> str:
    """The TOML name of the type of ``value`` (as :mod:`tomllib` produces it)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, (datetime.date, datetime.time)):
        return "date/time"
    return type(value).__name__


def _key_text(key: str) -> str:
    """``key`` as written in TOML: bare when possible, else a quoted basic string."""
    return key if _BARE_KEY.fullmatch(key) else _string(key)


# --------------------------------------------------------------------------- checks


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a valid chain id or node name, or ``None`` if it is valid.

    Valid: a str of 1 to 64 characters from ``[A-Za-z0-9._-]`` (safe as a file name stem).
    """
    if not isinstance(value, str):
        return f"expected a string, got {_type_name(value)}"
    if not NAME_PATTERN.fullmatch(value):
        return f"expected 1 to 64 characters from [A-Za-z0-9._-], got {_show(value)}"
    return None


def _url_problem(value: object) -> str | None:
    """Why ``value`` is not an acceptable node URL, or ``None`` if it is.

    Acceptable: ``ws://`` or ``wss://``, a host name or IP address (IPv6 in brackets), an
    explicit port in 1..65535, and at most a ``/`` path; no user info, query or fragment.
    """
    if not isinstance(value, str):
        return f"expected a string, got {_type_name(value)}"
    bad = f"{_URL_EXPECTED}, got {_show(value)}"
    if not value.isascii() or not value.isprintable() or any(ch.isspace() for ch in value):
        return bad
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return bad
    host = parts.hostname
    if parts.scheme not in ("ws", "wss") or not host or port is None:
        return bad
    if not 1 <= port <= 65535:
        return f"port must be in 1..65535, got {_show(value)}"
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return bad
    elif not _HOST_NAME.fullmatch(host):
        return bad
    if "@" in parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment:
        return (
            "expected only scheme, host and port (no user, path, query or fragment), "
            f"got {_show(value)}"
        )
    if "?" in value or "#" in value:
        return f"expected only scheme, host and port, got {_show(value)}"
    return None


def host_port(url: str) -> tuple[str, int]:
    """Return ``(host, port)`` of a node URL (an IPv6 host without its brackets).

    The host is lower-cased, as :func:`urllib.parse.urlsplit` gives it. Raises
    :class:`ChainConfigError` (field ``url``) if ``url`` is not a valid node URL.
    """
    problem = _url_problem(url)
    if problem is not None:
        raise ChainConfigError(problem, field="url")
    parts = urlsplit(url)
    return cast(str, parts.hostname), cast(int, parts.port)


def _check_int(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in range; else :class:`ChainConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChainConfigError(f"expected an integer, got {_type_name(value)}", field=name)
    if value < minimum:
        raise ChainConfigError(f"must be >= {minimum}, got {value}", field=name)
    if maximum is not None and value > maximum:
        raise ChainConfigError(f"must be <= {maximum}, got {value}", field=name)
    return value


# --------------------------------------------------------------------------- data classes


@dataclass(frozen=True)
class NodeInfo:
    """One node of the chain: its unique ``name``, its ``url`` and its Ed25519 ``identity``.

    ``url`` is kept exactly as written (see :func:`host_port`). ``identity`` is the node's
    long-term public key; it may be ``None`` only for the analyzer (:class:`ChainConfig`
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
        problem = _url_problem(self.url)
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


@dataclass(frozen=True)
class RoundPolicy:
    """When a round closes, and how batches are cut.

    * ``min_users`` (>= 1): a round never closes with fewer accepted users.
    * ``max_users`` (>= ``min_users``): a round closes as soon as it has this many.
    * ``deadline_seconds`` (finite, > 0): how long a round stays open; an int is accepted
      and stored as a float.
    * ``below_min``: at the deadline with fewer than ``min_users``, ``"wait"`` (close as
      soon as ``min_users`` is reached) or ``"abort"`` (clients resubmit next round).
    * ``chunk_size`` (1..:data:`MAX_CHUNK_SIZE`): payloads per batch frame between nodes.

    Construction validates and raises :class:`ChainConfigError` naming the field.
    """

    min_users: int
    max_users: int
    deadline_seconds: float
    below_min: BelowMin = "wait"
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        _check_int(self.min_users, "min_users", 1)
        _check_int(self.max_users, "max_users", 1)
        if self.max_users < self.min_users:
            raise ChainConfigError(
                f"must be >= min_users ({self.min_users}), got {self.max_users}",
                field="max_users",
            )
        deadline = self.deadline_seconds
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
            raise ChainConfigError(
                f"expected a number, got {_type_name(deadline)}", field="deadline_seconds"
            )
        if not math.isfinite(deadline) or deadline <= 0:
            raise ChainConfigError(
                f"must be a finite number > 0, got {deadline!r}", field="deadline_seconds"
            )
        object.__setattr__(self, "deadline_seconds", float(deadline))
        if self.below_min not in _BELOW_MIN:
            raise ChainConfigError(
                f'expected "wait" or "abort", got {_show(self.below_min)}', field="below_min"
            )
        _check_int(self.chunk_size, "chunk_size", 1, MAX_CHUNK_SIZE)


def _frozen_sections(sections: object) -> Mapping[str, Any]:
    """Validate ``sections`` and return a read-only deep copy of it."""
    if not isinstance(sections, Mapping):
        raise ChainConfigError(
            f"expected a mapping of tables, got {type(sections).__name__}", field="sections"
        )
    copied: dict[str, Any] = {}
    for key, value in sections.items():
        if not isinstance(key, str):
            raise ChainConfigError(f"section names must be strings, got {_show(key)}")
        if key in RESERVED_SECTIONS:
            raise ChainConfigError("is not an extra section but part of the chain", field=key)
        if not isinstance(value, Mapping):
            raise ChainConfigError(f"expected a table, got {_type_name(value)}", field=key)
        copied[key] = copy.deepcopy(dict(value))
    return MappingProxyType(copied)


@dataclass(frozen=True)
class ChainConfig:
    """A whole chain: its id, the mixes in order, the analyzer, the round policy, and the
    other top-level tables of the chain file (``sections``, e.g. ``"protocol"``), untouched.

    Invariants (checked at construction, :class:`ChainConfigError` with the TOML field path
    otherwise): ``chain_id`` is a valid name; there is at least one mix; every mix has an
    identity key; node names are unique across mixes and analyzer; no two nodes share a
    host and port; ``sections`` maps str names other than ``chain``, ``mix``, ``analyzer``
    and ``round`` to tables. ``mixes`` is stored as a tuple and ``sections`` as a read-only
    deep copy (the nested tables are plain dicts: do not mutate them). Instances compare by
    value; the hash leaves ``sections`` out.
    """

    chain_id: str
    mixes: tuple[NodeInfo, ...]
    analyzer: NodeInfo
    policy: RoundPolicy
    sections: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
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
        if not isinstance(self.analyzer, NodeInfo):
            raise ChainConfigError(
                f"expected a NodeInfo, got {type(self.analyzer).__name__}", field="analyzer"
            )
        if not isinstance(self.policy, RoundPolicy):
            raise ChainConfigError(
                f"expected a RoundPolicy, got {type(self.policy).__name__}", field="round"
            )
        self._check_unique()
        object.__setattr__(self, "sections", _frozen_sections(self.sections))

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
                    f"same host and port as {endpoints[endpoint]}.url, got {_show(node.url)}",
                    field=f"{path}.url",
                )
            endpoints[endpoint] = path

    def _paths(self) -> list[tuple[str, NodeInfo]]:
        """Every node with its TOML path (``mix[i]`` or ``analyzer``), in chain order."""
        paths = [(f"mix[{index}]", mix) for index, mix in enumerate(self.mixes)]
        paths.append(("analyzer", self.analyzer))
        return paths

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """All nodes in chain order: the mixes, then the analyzer."""
        return (*self.mixes, self.analyzer)

    def node(self, name: str) -> NodeInfo:
        """The node called ``name``; :class:`ChainConfigError` if there is none."""
        return self.nodes[self.hop_of(name)]

    def hop_of(self, name: str) -> int:
        """The position of node ``name``: its index among the mixes (0 for the entry mix),
        or ``len(mixes)`` for the analyzer. :class:`ChainConfigError` if unknown."""
        for index, node in enumerate(self.nodes):
            if node.name == name:
                return index
        known = ", ".join(node.name for node in self.nodes)
        raise ChainConfigError(f"unknown node {_show(name)}; the chain has: {known}")

    def successor(self, name: str) -> NodeInfo | None:
        """The node after ``name`` (the analyzer after the last mix), or ``None`` after the
        analyzer. :class:`ChainConfigError` if ``name`` is unknown."""
        hop = self.hop_of(name)
        nodes = self.nodes
        return nodes[hop + 1] if hop + 1 < len(nodes) else None


# --------------------------------------------------------------------------- parsing


def load_chain_config(path: str | os.PathLike[str]) -> ChainConfig:
    """Read and validate the chain file at ``path`` (see the module docstring).

    Raises :class:`ChainConfigError` with a one-line message starting with ``path`` if the
    file cannot be read, is larger than :data:`MAX_CHAIN_FILE_SIZE` bytes, is not UTF-8,
    is not valid TOML (tomllib's message, with line and column), or does not describe a
    valid chain (see :func:`parse_chain_config`).
    """
    source = os.fspath(path)
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
    return parse_chain_config(data, source=source)


def parse_chain_config(data: Mapping[str, Any], *, source: str) -> ChainConfig:
    """Validate a parsed chain file ``data`` (as :mod:`tomllib` returns it).

    ``source`` names where ``data`` came from, for messages. Rejects missing tables and
    fields, unknown keys in ``[chain]``, ``[[mix]]``, ``[analyzer]`` and ``[round]``,
    top-level keys that are not tables, values of the wrong TOML type (a boolean is not an
    integer; ``deadline_seconds`` may be an integer or a float), invalid names, URLs and
    public keys, out-of-range policy values, duplicate node names and duplicate host:port
    pairs. Raises :class:`ChainConfigError` with ``source`` and the field path.
    """
    if not isinstance(data, Mapping):
        raise ChainConfigError(f"expected a table, got {_type_name(data)}", source=source)
    try:
        return _parse(data)
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
        raise ChainConfigError(f"expected a table, got {_type_name(value)}", field=path)
    for key in value:
        if key not in allowed:
            raise ChainConfigError(
                f"unknown key (allowed: {', '.join(allowed)})", field=f"{path}.{_key_text(key)}"
            )
    return value


def _required(table: Mapping[str, Any], key: str, path: str) -> object:
    """``table[key]``; :class:`ChainConfigError` naming ``path.key`` if it is missing."""
    if key not in table:
        raise ChainConfigError("missing", field=f"{path}.{key}")
    return table[key]


def _string(value: str) -> str:
    """``value`` as a TOML basic string, escaped so that it loads back identical."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("strings with lone surrogates cannot be written as TOML")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _typed_str(value: object, path: str) -> str:
    """``value`` if it is a str; else :class:`ChainConfigError` naming ``path``."""
    if not isinstance(value, str):
        raise ChainConfigError(f"expected a string, got {_type_name(value)}", field=path)
    return value


def _parse_node(value: object, path: str, *, identity_required: bool) -> NodeInfo:
    """Parse one ``[[mix]]`` or the ``[analyzer]`` table found at ``path``."""
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
    """Parse the ``[round]`` table."""
    table = _table(data, "round", _ROUND_KEYS)
    min_users = _required(table, "min_users", "round")
    max_users = _required(table, "max_users", "round")
    deadline = _required(table, "deadline_seconds", "round")
    below_min = _typed_str(_required(table, "below_min", "round"), "round.below_min")
    chunk_size = table.get("chunk_size", DEFAULT_CHUNK_SIZE)
    try:
        return RoundPolicy(
            min_users=cast(int, min_users),
            max_users=cast(int, max_users),
            deadline_seconds=cast(float, deadline),
            below_min=cast(BelowMin, below_min),
            chunk_size=cast(int, chunk_size),
        )
    except ChainConfigError as exc:
        raise ChainConfigError(exc.problem, field=f"round.{exc.field}") from None


def _parse(data: Mapping[str, Any]) -> ChainConfig:
    """:func:`parse_chain_config` without the ``source`` (errors carry field paths)."""
    chain = _table(data, "chain", _CHAIN_KEYS)
    chain_id = _typed_str(_required(chain, "id", "chain"), "chain.id")
    if "mix" not in data:
        raise ChainConfigError("missing (at least one [[mix]] table is required)", field="mix")
    mix_list = data["mix"]
    if not isinstance(mix_list, list):
        raise ChainConfigError(
            f"expected an array of [[mix]] tables, got {_type_name(mix_list)}", field="mix"
        )
    mixes = tuple(
        _parse_node(item, f"mix[{index}]", identity_required=True)
        for index, item in enumerate(mix_list)
    )
    if "analyzer" not in data:
        raise ChainConfigError("missing table [analyzer]", field="analyzer")
    analyzer = _parse_node(data["analyzer"], "analyzer", identity_required=False)
    policy = _parse_policy(data)
    sections: dict[str, Any] = {}
    for key, value in data.items():
        if key in RESERVED_SECTIONS:
            continue
        if not isinstance(value, dict):
            raise ChainConfigError(
                f"unknown top-level key; expected a table, got {_type_name(value)}",
                field=_key_text(key),
            )
        sections[key] = value
    return ChainConfig(
        chain_id=chain_id, mixes=mixes, analyzer=analyzer, policy=policy, sections=sections
    )


# --------------------------------------------------------------------------- rendering


def _value(value: object) -> str:
    """``value`` as a TOML value: str, int, float, bool, date/time, array or inline table.

    Raises ``ValueError`` for values TOML cannot hold (e.g. ``None``, bytes, a str with a
    lone surrogate, an integer outside the signed 64-bit range).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            raise ValueError(f"integer {value} does not fit TOML's 64 bits; write it as a string")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_table_key(key)} = {_value(item)}" for key, item in value.items())
        return "{ " + items + " }" if items else "{}"
    raise ValueError(f"cannot write a {type(value).__name__} value as TOML")


def _table_key(key: object) -> str:
    """A mapping key as TOML text; ``ValueError`` unless it is a str."""
    if not isinstance(key, str):
        raise ValueError(f"TOML keys must be strings, got {_show(key)}")
    return _key_text(key)


def _node_lines(node: NodeInfo) -> list[str]:
    """The ``key = value`` lines of a node table."""
    lines = [f"name = {_string(node.name)}", f"url = {_string(node.url)}"]
    if node.identity is not None:
        lines.append(f"identity = {_string(public_key_text(node.identity))}")
    return lines


def render_chain_config(config: ChainConfig) -> str:
    """Return TOML text for ``config`` that :func:`load_chain_config` loads back equal.

    Tables are written in the order ``[chain]``, ``[[mix]]``..., ``[analyzer]``,
    ``[round]``, then each section of :attr:`ChainConfig.sections` in its order; nested
    tables inside a section are written as inline tables. Section values may be str, int
    (signed 64-bit), float, bool, date/time, arrays and tables of those. Raises ``TypeError``
    if ``config`` is not a :class:`ChainConfig` and ``ValueError`` for a section value TOML
    cannot hold.
    """
    if not isinstance(config, ChainConfig):
        raise TypeError(f"config must be a ChainConfig, not {type(config).__name__}")
    blocks: list[list[str]] = [["[chain]", f"id = {_string(config.chain_id)}"]]
    blocks.extend(["[[mix]]", *_node_lines(mix)] for mix in config.mixes)
    blocks.append(["[analyzer]", *_node_lines(config.analyzer)])
    policy = config.policy
    blocks.append(
        [
            "[round]",
            f"min_users = {_value(policy.min_users)}",
            f"max_users = {_value(policy.max_users)}",
            f"deadline_seconds = {_value(float(policy.deadline_seconds))}",
            f"below_min = {_string(policy.below_min)}",
            f"chunk_size = {_value(policy.chunk_size)}",
        ]
    )
    rendered = "\n\n".join("\n".join(block) for block in blocks) + "\n"
    for name, table in config.sections.items():
        rendered += "\n" + render_table(name, table)
    return rendered


def render_table(name: str, table: Mapping[str, Any]) -> str:
    """One TOML table ``[name]`` with ``key = value`` lines (nested tables inline).

    Raises ``ValueError`` for a key or value TOML cannot hold.
    """
    lines = [f"[{_table_key(name)}]"]
    lines.extend(f"{_table_key(key)} = {_value(value)}" for key, value in table.items())
    return "\n".join(lines) + "\n"


def write_chain_config(
    path: str | os.PathLike[str], config: ChainConfig, *, overwrite: bool = False
) -> None:
    """Write ``render_chain_config(config)`` to ``path`` (mode 0644 less the umask, fsynced).

    Without ``overwrite`` an existing file is never touched; with it the old file is
    replaced atomically (temporary file in the same directory, then rename). Raises
    :class:`ChainConfigError` (naming ``path``) if the file exists and ``overwrite`` is
    false or if it cannot be written, and ``ValueError`` if ``config`` cannot be rendered.
    """
    text = render_chain_config(config).encode("utf-8")
    target = Path(path)
    source = os.fspath(path)
    if not overwrite:
        _write_new_file(target, text, source)
        return
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    _write_new_file(temporary, text, source)
    try:
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ChainConfigError(f"cannot write chain file: {exc.strerror}", source=source) from None


def _write_new_file(path: Path, data: bytes, source: str) -> None:
    """Create ``path`` (which must not exist; mode 0644 less the umask), write ``data``,
    fsync; on failure remove the partial file and raise :class:`ChainConfigError`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise ChainConfigError(
            "chain file already exists; refusing to overwrite it", source=source
        ) from None
    except OSError as exc:
        raise ChainConfigError(f"cannot create chain file: {exc.strerror}", source=source) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise ChainConfigError(f"cannot write chain file: {exc.strerror}", source=source) from None
    os.close(fd)
