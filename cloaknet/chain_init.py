"""A consistent chain directory in one step (``cloaknet chain init``), and the ``[round]``
table that goes with a plan (``cloaknet plan --toml``).

A chain file's ``[round]`` and ``[protocol]`` tables must agree: the protocol's guarantee has
to hold for every round size the policy accepts (``docs/chainfile.md``). :func:`round_section`
derives the ``[round]`` table from a :class:`~cloaknet.plans.SelectedPlan` (``min_users`` =
the planned users, ``max_users`` = the plan's largest round) and :func:`check_tables` runs the
chain loader's own check on the pair, so whatever these functions print or write loads.
"""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloaknet.chainfile import SINK_TABLE, ChainFileError, generate_node_keys, write_chain_file
from cloaknet.plans import SelectedPlan
from cloaknet.protocol_table import read_protocol_table, selected_section
from mixnet.chain import ChainConfig, ChainConfigError, NodeInfo
from mixnet.core.policy import BelowMin, PolicyError, RoundPolicy

__all__ = [
    "ANALYZER_NAME",
    "DEFAULT_DEADLINE_SECONDS",
    "InitializedChain",
    "check_tables",
    "free_ports",
    "init_chain",
    "node_commands",
    "round_section",
]

#: ``[round].deadline_seconds`` written unless asked otherwise (seconds a round stays open).
DEFAULT_DEADLINE_SECONDS = 600.0
#: Name of the analyzer node in a chain made by :func:`init_chain`.
ANALYZER_NAME = "analyzer"


def round_section(
    selected: SelectedPlan,
    *,
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
    below_min: BelowMin = "wait",
) -> dict[str, Any]:
    """The ``[round]`` table for ``selected``: rounds of ``selected.users`` to
    ``selected.max_users`` users (where the plan's guarantee was checked), closing at
    ``deadline_seconds`` (> 0) if at least ``min_users`` submitted, else ``below_min``
    (``"wait"`` or ``"abort"``).

    :raises ChainFileError: the round policy is invalid (field ``round.<key>``).
    """
    table: dict[str, Any] = {
        "min_users": selected.users,
        "max_users": selected.max_users,
        "deadline_seconds": float(deadline_seconds),
        "below_min": below_min,
    }
    _policy(table)
    return table


def _policy(table: Mapping[str, Any]) -> RoundPolicy:
    try:
        return RoundPolicy(
            min_users=table["min_users"],
            max_users=table["max_users"],
            deadline_seconds=table["deadline_seconds"],
            below_min=table["below_min"],
        )
    except PolicyError as exc:
        raise ChainFileError(exc.problem, field=f"round.{exc.field}") from None


def check_tables(round_table: Mapping[str, Any], protocol_table: Mapping[str, Any]) -> None:
    """Run the chain loader's check of a ``[protocol]`` table against a ``[round]`` table.

    :raises ChainFileError: they do not fit together (e.g. the stated guarantee fails for the
        largest round); the message names the field and the reason.
    """
    read_protocol_table(dict(protocol_table), _policy(round_table))


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct TCP ports that are free on ``host`` right now (the OS's choice for
    port 0). Another process may take one before the node binds it; the node then exits with
    an OS error naming the port.

    :raises OSError: ``host`` is not a local address.
    """
    sockets: list[socket.socket] = []
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class InitializedChain:
    """What :func:`init_chain` wrote: the chain file, each mix's key file, and the command
    that starts each node (analyzer first, then the mixes from the last to the first)."""

    chain_file: Path
    key_files: Mapping[str, Path]
    commands: tuple[str, ...]


def _url(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"


@dataclass(frozen=True)
class LocalChain:
    """A chain of mixes ``mix1 … mixN`` and the analyzer on free ports of one host: its
    configuration, the mixes' names and the ports (the mixes', then the analyzer's)."""

    config: ChainConfig
    names: list[str]
    ports: list[int]


def local_chain(
    directory: Path,
    *,
    chain_id: str,
    mixes: int,
    policy: RoundPolicy,
    host: str = "127.0.0.1",
    ownership_proofs: bool = False,
) -> LocalChain:
    """Write identity keys for ``mix1 … mix<mixes>`` into ``directory`` (files 0600; see
    :func:`~cloaknet.chainfile.generate_node_keys`), pick free ports on ``host``
    (:func:`free_ports`) and return the configuration of that chain; writing its chain
    file is the caller's (with the protocol table it wants).

    If the configuration is refused, the key files this call wrote are removed again.

    :raises ChainConfigError: ``chain_id`` or the policy is not valid for a chain.
    :raises ChainFileError: a key file exists already or cannot be written (nothing is left
        written; :func:`~cloaknet.chainfile.generate_node_keys`).
    :raises OSError: ``host`` is not a local address.
    """
    names = [f"mix{i + 1}" for i in range(mixes)]
    ports = free_ports(host, mixes + 1)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    keys = generate_node_keys(directory, names)
    try:
        config = ChainConfig(
            chain_id=chain_id,
            mixes=tuple(
                NodeInfo(name, _url(host, port), keys[name])
                for name, port in zip(names, ports[:-1], strict=True)
            ),
            sink=NodeInfo(ANALYZER_NAME, _url(host, ports[-1]), None),
            policy=policy,
            sink_table=SINK_TABLE,
            ownership_proofs=ownership_proofs,
        )
    except BaseException:
        _remove([directory / f"{name}.key" for name in names])
        raise
    return LocalChain(config, names, ports)


def node_commands(chain_file: Path, key_files: Mapping[str, Path], mixes: Sequence[str]) -> (
    tuple[str, ...]
):
    """One shell command per node that starts it, quoted for a POSIX shell."""
    chain = shlex.quote(os.fspath(chain_file))
    commands = [f"cloaknet node --chain {chain} --name {ANALYZER_NAME}"]
    for name in reversed(mixes):
        key = shlex.quote(os.fspath(key_files[name]))
        commands.append(f"cloaknet node --chain {chain} --name {name} --key {key}")
    return tuple(commands)


def init_chain(
    directory: Path,
    selected: SelectedPlan,
    *,
    mixes: int,
    host: str = "127.0.0.1",
    chain_id: str = "chain",
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
    below_min: BelowMin = "wait",
    ownership_proofs: bool = False,
) -> InitializedChain:
    """Write a chain of ``mixes`` mixes (``mix1`` … ``mixM``) and an analyzer running
    ``selected`` into ``directory`` (created 0700 if missing): an identity key per mix
    (``<name>.key``, 0600) and ``chain.toml`` with ``[chain]``, ``[[mix]]``, ``[analyzer]``,
    ``[round]`` (:func:`round_section`) and ``[protocol]`` (what ``cloaknet plan --toml``
    prints), every node on a free port of ``host``; ``ownership_proofs`` sets
    ``[chain] ownership_proofs`` (mixes can then trace and exclude layers that do not open,
    at 48 more bytes per message per mix after the first).

    Everything is checked before anything is written (the tables together, the names, that
    neither the chain file nor a key file exists); a failure midway removes what this call
    wrote.

    :raises ChainFileError: the tables do not fit, ``chain_id`` is not a valid name, or a
        file exists already or cannot be written.
    :raises ValueError: ``mixes < 1``.
    :raises OSError: ``host`` is not a local address.
    """
    if mixes < 1:
        raise ValueError(f"mixes must be >= 1, got {mixes}")
    protocol = selected_section(selected)
    rounds = round_section(selected, deadline_seconds=deadline_seconds, below_min=below_min)
    check_tables(rounds, protocol)
    chain_file = directory / "chain.toml"
    if os.path.lexists(chain_file):
        raise ChainFileError("chain file already exists; refusing to overwrite it",
                             source=os.fspath(chain_file))  # fmt: skip
    try:
        local = local_chain(
            directory, chain_id=chain_id, mixes=mixes, policy=_policy(rounds), host=host,
            ownership_proofs=ownership_proofs,
        )  # fmt: skip
    except ChainConfigError as exc:
        raise ChainFileError(exc.problem, field=exc.field) from None
    key_files = {name: directory / f"{name}.key" for name in local.names}
    try:
        write_chain_file(chain_file, local.config, protocol)
    except ChainConfigError as exc:
        _remove(key_files.values())
        raise ChainFileError(exc.problem, field=exc.field) from None
    except BaseException:
        _remove(key_files.values())
        raise
    return InitializedChain(
        chain_file, key_files, node_commands(chain_file, key_files, local.names)
    )


def _remove(paths: Sequence[Path] | Any) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)
