"""A whole chain — L mixes and the analyzer — in one event loop, on ephemeral loopback ports.

For tests and experiments that want real sockets, real crypto and real sqlite without
separate processes (the ``cloaknet demo`` command runs separate processes instead).
Nodes are started from the analyzer backwards, so each mix knows its successor's port.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from nacl.signing import SigningKey

from cloaknet.analyzer_node import AnalyzerNode
from cloaknet.chainfile import CloakChain
from cloaknet.params import CloakParams
from cloaknet.protocols import SummationProtocol
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.core import IntakePolicy
from mixnet.server import BaseNode, MixNode, NodeSettings
from mixnet.store import NodeStore

__all__ = ["LocalChain", "local_chain"]

HOST = "127.0.0.1"


@dataclass
class LocalChain:
    """A running in-process chain: its chain description and its nodes (mixes, then the
    analyzer)."""

    chain: CloakChain
    mixes: list[MixNode]
    analyzer: AnalyzerNode

    @property
    def nodes(self) -> list[BaseNode]:
        return [*self.mixes, self.analyzer]


@contextlib.asynccontextmanager
async def local_chain(
    directory: Path,
    params: CloakParams | SummationProtocol,
    policy: RoundPolicy,
    *,
    mixes: int = 3,
    chain_id: str = "local",
    dump_dir: Path | None = None,
) -> AsyncIterator[LocalChain]:
    """Start ``mixes`` mix nodes and an analyzer on 127.0.0.1 port 0, each with its own sqlite
    store in ``directory``; stop them all on exit."""
    if mixes < 1:
        raise ValueError("a chain needs at least one mix")
    cloak = params if isinstance(params, CloakParams) else None
    protocol = None if isinstance(params, CloakParams) else params
    if cloak is not None:
        messages, payload_length = cloak.messages, cloak.share_bytes
    else:
        assert protocol is not None
        messages, payload_length = int(protocol.messages_per_user), protocol.bytes_per_message
    names = [f"mix{i + 1}" for i in range(mixes)] + ["analyzer"]
    identities = [SigningKey.generate() for _ in range(mixes)]
    intake = IntakePolicy(
        policy.min_users, policy.max_users, policy.deadline_seconds, policy.below_min
    )
    stores: list[NodeStore] = []
    started: list[BaseNode] = []

    def settings(hop: int, successor: str | None) -> NodeSettings:
        return NodeSettings(
            chain_id=chain_id,
            name=names[hop],
            hop=hop,
            hops=mixes,
            predecessor=names[hop - 1] if hop else None,
            successor_url=successor,
            predecessor_identity=identities[hop - 1].verify_key if hop else None,
            messages=messages,
            payload_length=payload_length,
            policy=intake,
            chunk_size=policy.chunk_size,
        )

    try:
        store = NodeStore(directory / "analyzer.db")
        stores.append(store)
        analyzer = AnalyzerNode(
            settings(mixes, None), store, cloak, dump_dir=dump_dir, protocol=protocol
        )
        port = await analyzer.start(HOST, 0)
        started.append(analyzer)
        urls = {"analyzer": f"ws://{HOST}:{port}"}
        mix_nodes: list[MixNode] = []
        for hop in range(mixes - 1, -1, -1):
            store = NodeStore(directory / f"{names[hop]}.db")
            stores.append(store)
            mix = MixNode(settings(hop, urls[names[hop + 1]]), store, identities[hop])
            port = await mix.start(HOST, 0)
            started.append(mix)
            urls[names[hop]] = f"ws://{HOST}:{port}"
            mix_nodes.insert(0, mix)
        config = ChainConfig(
            chain_id=chain_id,
            mixes=tuple(
                NodeInfo(names[i], urls[names[i]], identities[i].verify_key) for i in range(mixes)
            ),
            analyzer=NodeInfo("analyzer", urls["analyzer"], None),
            policy=policy,
            sections={},
        )
        yield LocalChain(CloakChain(config, cloak, None, protocol), mix_nodes, analyzer)
    finally:
        for running in reversed(started):
            await running.stop()
        for store in stores:
            store.close()
