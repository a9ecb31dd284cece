"""Run one node of a chain: ``cloaknet node --chain chain.toml --name mix1 --key mix1.key``.

Builds the node's :class:`~mixnet.server.NodeSettings` from the chain file, opens its sqlite
store (default: ``<name>.db`` next to the chain file) and serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from cloaknet.analyzer_node import AnalyzerNode
from cloaknet.chainfile import CloakChain, load_chain
from mixnet.chain import host_port
from mixnet.core import IntakePolicy
from mixnet.errors import MixnetError
from mixnet.keys import read_key_file
from mixnet.server import BaseNode, MixNode, NodeSettings
from mixnet.store import NodeStore

__all__ = ["build_node", "node_settings", "run_node"]

log = logging.getLogger("cloaknet.node")


class NodeConfigError(MixnetError):
    """The node cannot start with this chain file, name or key (one-line reason)."""

    code = "bad-node-config"


def node_settings(chain: CloakChain, name: str) -> NodeSettings:
    """The settings of node ``name`` in ``chain``.

    :raises NodeConfigError: the name is not in the chain file.
    """
    config = chain.config
    names = [m.name for m in config.mixes] + [config.analyzer.name]
    if name not in names:
        raise NodeConfigError(f"no node named {name!r} in the chain (nodes: {', '.join(names)})")
    hop = names.index(name)
    hops = len(config.mixes)
    successor = (
        None
        if hop == hops
        else (config.mixes[hop + 1].url if hop + 1 < hops else config.analyzer.url)
    )
    policy = config.policy
    return NodeSettings(
        chain_id=config.chain_id,
        name=name,
        hop=hop,
        hops=hops,
        predecessor=None if hop == 0 else names[hop - 1],
        predecessor_identity=None if hop == 0 else config.mixes[hop - 1].identity,
        successor_url=successor,
        messages=chain.messages,
        payload_length=chain.payload_length,
        policy=IntakePolicy(
            policy.min_users, policy.max_users, policy.deadline_seconds, policy.below_min
        ),
        chunk_size=policy.chunk_size,
    )


def build_node(
    chain: CloakChain,
    name: str,
    key_path: Path | None,
    store: NodeStore,
    *,
    dump_dir: Path | None = None,
) -> BaseNode:
    """Construct (not start) the node ``name``: a mix needs its identity key file; only the
    analyzer accepts ``dump_dir``."""
    settings = node_settings(chain, name)
    if settings.hop == settings.hops:
        return AnalyzerNode(
            settings, store, chain.params, dump_dir=dump_dir, protocol=chain.protocol
        )
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
    return MixNode(settings, store, identity)


async def run_node(
    chain_path: Path,
    name: str,
    key_path: Path | None,
    db_path: Path | None,
    listen: str | None,
    dump_dir: Path | None = None,
) -> None:
    """Load the chain file, start the node and serve until SIGINT or SIGTERM."""
    chain = load_chain(chain_path)
    url = next(
        (n.url for n in (*chain.config.mixes, chain.config.analyzer) if n.name == name), None
    )
    if url is None:
        raise NodeConfigError(f"no node named {name!r} in {chain_path}")
    host, port = host_port(url)
    store = NodeStore(db_path or chain_path.parent / f"{name}.db")
    node = build_node(chain, name, key_path, store, dump_dir=dump_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await node.start(listen or host, port)
    try:
        await stop.wait()
    finally:
        await node.stop()
        store.close()
        log.info("%s stopped", name)
