"""Run one node of a chain: ``cloaknet node --chain chain.toml --name mix1 --key mix1.key``.

The node's :class:`~mixnet.settings.NodeSettings` come from the chain file
(:func:`mixnet.settings.node_settings`, with the protocol's message count and width); a mix
is a :class:`~mixnet.mix.MixNode` with its identity key, the analyzer a
:class:`~mixnet.sink.SinkNode` running :class:`~cloaknet.analyzer_node.AnalyzerApp`. The
node's sqlite store defaults to ``<name>.db`` next to the chain file; it serves until SIGINT
or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from nacl.signing import SigningKey

from cloaknet.analyzer_node import analyzer_node
from cloaknet.chainfile import CloakChain, load_chain
from mixnet.chain import host_port
from mixnet.errors import MixnetError
from mixnet.keys import read_key_file
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import NodeSettings, node_settings
from mixnet.store import NodeStore

__all__ = ["NodeConfigError", "build_node", "run_node"]

log = logging.getLogger("cloaknet.node")


class NodeConfigError(MixnetError):
    """The node cannot start with these options: a mix without its key file or with a key
    that is not the one the chain file lists, or ``--dump-dir`` on a mix (one-line reason)."""

    code = "bad-node-config"


def _prepare(
    chain: CloakChain, name: str, key_path: Path | None, dump_dir: Path | None
) -> tuple[NodeSettings, SigningKey | None]:
    """Everything that can be checked before the node's store is opened: its settings and,
    for a mix, its identity key (``None`` for the analyzer). Raises as :func:`build_node`."""
    settings = node_settings(
        chain.config, name, messages=chain.messages, payload_length=chain.payload_length
    )
    if settings.hop == settings.hops:
        return settings, None
    if dump_dir is not None:
        raise NodeConfigError("--dump-dir is an analyzer option")
    if key_path is None:
        raise NodeConfigError(f"mix {name!r} needs --key (its identity key file)")
    identity = read_key_file(key_path)
    listed = chain.config.mixes[settings.hop].identity
    if listed is None or bytes(listed) != bytes(identity.verify_key):
        raise NodeConfigError(
            f"{key_path}: this key's public half is not the identity listed for {name!r}"
        )
    return settings, identity


def _make(
    chain: CloakChain,
    settings: NodeSettings,
    identity: SigningKey | None,
    store: NodeStore,
    dump_dir: Path | None,
) -> BaseNode:
    if identity is None:
        return analyzer_node(settings, store, chain.protocol, dump_dir=dump_dir)
    return MixNode(settings, store, identity)


def build_node(
    chain: CloakChain,
    name: str,
    key_path: Path | None,
    store: NodeStore,
    *,
    dump_dir: Path | None = None,
) -> BaseNode:
    """Construct (not start) node ``name`` of ``chain`` on ``store``.

    A mix needs ``key_path``, its identity key file, whose public half must be the identity
    the chain file lists for it; only the analyzer accepts ``dump_dir`` (see
    :class:`~cloaknet.analyzer_node.AnalyzerApp`).

    :raises ChainConfigError: no node is called ``name`` in the chain.
    :raises NodeConfigError: a mix without ``key_path``, with another key, or with
        ``dump_dir``.
    :raises KeyFileError: the key file is unreadable or invalid.
    """
    settings, identity = _prepare(chain, name, key_path, dump_dir)
    return _make(chain, settings, identity, store, dump_dir)


async def run_node(
    chain_path: Path,
    name: str,
    key_path: Path | None,
    db_path: Path | None,
    listen: str | None,
    dump_dir: Path | None = None,
) -> None:
    """Load the chain file, start node ``name`` and serve until SIGINT or SIGTERM.

    It listens on ``listen`` (default: the host of its URL in the chain file) at the port of
    that URL, and keeps its state in ``db_path`` (default ``<name>.db`` next to the chain
    file), which is opened only once the name and key have been checked. The node is stopped
    and the store closed however this ends.

    :raises ChainFileError: the chain file is unreadable or invalid.
    :raises ChainConfigError, NodeConfigError, KeyFileError: as :func:`build_node`.
    :raises OSError: the store cannot be opened or the port cannot be bound.
    """
    chain = load_chain(chain_path)
    settings, identity = _prepare(chain, name, key_path, dump_dir)
    host, port = host_port(chain.config.node(name).url)
    store = NodeStore(db_path or chain_path.parent / f"{name}.db")
    try:
        node = _make(chain, settings, identity, store, dump_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await node.start(listen or host, port)
            await stop.wait()
        finally:
            await node.stop()
    finally:
        store.close()
    log.info("%s stopped", name)
