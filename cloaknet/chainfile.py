"""cloaknet's view of a chain file: the generic chain (:mod:`mixnet.chain`) plus ``[protocol]``.

A :class:`CloakChain` is the chain configuration and the one
:class:`~cloaknet.protocols.base.SummationProtocol` its clients, mixes and analyzer run. The
``[protocol]`` table (read by :mod:`cloaknet.protocol_table`) has three forms, all described
with examples in ``docs/chainfile.md``::

    [protocol]                       # the cloak's explicit parameters
    mode = "single-user"             # or "sum-preserving"
    messages = 49
    modulus = "6823978027"           # decimal string (N may exceed 64 bits); an int is accepted
    precision = 100000
    max_users = 1000                 # optional; default [round].max_users; must be >= it
    noise_scale = "208333/1"         # exact fractions "num/den" (or integers), single-user only
    noise_q = "81028/43980465111"

    [protocol]                       # the cloak, planned when the file is loaded
    plan = { users = 1000, epsilon = 1.0, delta = 1e-6, mode = "single-user" }

    [protocol]                       # a comparison protocol, for exactly `users` users
    name = "bbgn"                    # "blanket", "cheu" or "bbgn"
    users = 1000
    epsilon = 1.0
    delta = 1e-6

and ``name = "vector"`` for vector sums (:mod:`cloaknet.vector_table`).

A round closes with any n in ``[round].min_users .. max_users`` users, and the guarantee
must hold for every such n (:mod:`cloaknet.guarantee`). The bounds move in opposite
directions: single-user changes (Lemma 11; 13 with colluders) and the BBGN bound weaken as
rounds shrink, so ``users <= min_users`` is required and the claim is checked at
``min_users``; sum-preserving changes (Lemma 6; 12 with colluders, ε = (n − 1)·ln β) weaken
as rounds grow, so the claim is checked at ``max_users``. A plan (``plan = {...}``, made
with ``max_users = [round].max_users``) or explicit parameters with an informational
``epsilon``/``delta`` that fail anywhere in that range are refused. The analyzer must
handle the largest round, so the parameters' ``max_users`` must be at least
``[round].max_users``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nacl.signing import VerifyKey

from cloaknet.params import CloakParams
from cloaknet.planner import Plan
from cloaknet.protocol_table import (
    CHAIN_PROTOCOLS,
    ChainFileError,
    check_policy,
    protocol_section,
    read_protocol_table,
)
from cloaknet.protocols import SummationProtocol
from mixnet.chain import ChainConfig, ChainConfigError, load_chain_config, name_problem
from mixnet.chain_render import write_chain_config
from mixnet.errors import KeyFileError
from mixnet.keys import generate_identity, write_key_file

#: The chain file's table for the node at the end of the chain, where the analyzer runs.
SINK_TABLE = "analyzer"

__all__ = [
    "CHAIN_PROTOCOLS",
    "SINK_TABLE",
    "ChainFileError",
    "CloakChain",
    "chain_from_config",
    "generate_node_keys",
    "load_chain",
    "protocol_section",
    "write_chain_file",
]


def _from_config_error(exc: ChainConfigError) -> ChainFileError:
    """The :class:`ChainFileError` carrying the parts of a generic chain error."""
    return ChainFileError(exc.problem, source=exc.source, field=exc.field)


@dataclass(frozen=True)
class CloakChain:
    """A chain file as cloaknet uses it: the generic chain, the protocol it runs, and the
    plan that produced the protocol's parameters (``None`` unless the file asked for
    planning at load time).

    ``protocol`` is a :class:`~cloaknet.protocols.CloakProtocol` (explicit parameters or a
    plan; its exact :class:`~cloaknet.params.CloakParams` are ``protocol.params``), a
    comparison protocol, or for vector sums (``name = "vector"``) a
    :class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`. Invariants (checked at
    construction by :func:`cloaknet.protocol_table.check_policy`; :class:`ChainFileError`
    otherwise, and ``TypeError`` for wrong types):
    ``[round].max_users <= protocol.max_round_users``;
    ``[round].min_users >= protocol.min_round_users`` (and ``>= plan.users``); a protocol
    planned for exactly n users needs ``min_users = max_users = n``; with ``plan``, the
    protocol is the cloak with ``plan.params`` and the plan meets its target (ε, δ) for every
    round size ``[round]`` allows (Lemma 6/12 at ``max_users``, Lemma 11/13 and BBGN at
    ``min_users``); the protocol sends a whole number of messages per user.
    """

    config: ChainConfig
    protocol: SummationProtocol
    plan: Plan | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config, ChainConfig):
            raise TypeError(f"config must be a ChainConfig, not {type(self.config).__name__}")
        if not isinstance(self.protocol, SummationProtocol):
            raise TypeError(
                f"protocol must be a SummationProtocol, not {type(self.protocol).__name__}"
            )
        if self.protocol.messages_per_user != int(self.protocol.messages_per_user):
            raise ChainFileError(
                "the protocol's message count must be a whole number", field="protocol"
            )
        check_policy(self.config.policy, self.protocol, self.plan)

    @property
    def messages(self) -> int:
        """m, the number of payloads every client submits."""
        return self.protocol.message_count

    @property
    def payload_length(self) -> int:
        """Bytes of one plaintext payload (one fixed-width message)."""
        return self.protocol.bytes_per_message

    @property
    def message_modulus(self) -> int:
        """Payloads are integers in [0, message_modulus)."""
        return self.protocol.message_modulus


# --------------------------------------------------------------------------- loading


def load_chain(path: str | os.PathLike[str]) -> CloakChain:
    """Load the chain file at ``path`` and its ``[protocol]`` (see the module docstring).

    A ``plan = {...}`` request runs the planner (``max_users`` = ``[round].max_users``) and
    keeps its :class:`~cloaknet.planner.Plan`. Raises :class:`ChainFileError` with a
    one-line message naming ``path`` and the field for every problem: the generic chain's
    (wrapped :class:`~mixnet.chain.ChainConfigError`), a missing or invalid ``[protocol]``,
    parameters that :class:`~cloaknet.params.CloakParams`, the planner or a protocol reject
    (their reason kept), and parameters that do not fit ``[round]``.
    """
    try:
        config = load_chain_config(path, sink_table=SINK_TABLE)
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
        protocol, made = read_protocol_table(config.sections.get("protocol"), config.policy)
        return CloakChain(config, protocol, made)
    except ChainFileError as exc:
        raise ChainFileError(exc.problem, source=source, field=exc.field) from None


# --------------------------------------------------------------------------- writing


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
        complete = dataclasses.replace(config, sections=sections, sink_table=SINK_TABLE)
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
