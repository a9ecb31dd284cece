"""A whole chain — L mixes and the analyzer — in one event loop, on ephemeral loopback ports.

For tests and experiments that want real sockets, real crypto and real sqlite without
separate processes (the ``cloaknet demo`` command runs separate processes instead).

Each node's settings come from :func:`mixnet.settings.node_settings` applied to the chain's
configuration, exactly as ``cloaknet node`` derives them from a chain file. Ports are only
known once a node is listening, so nodes are started from the analyzer backwards: each mix is
configured after its successor has bound its port, and nodes not started yet are listed at a
placeholder address (``ws://unstarted.invalid:<hop + 1>``) that no settings ever use.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cloaknet.analyzer_node import analyzer_node
from cloaknet.chainfile import SINK_TABLE, CloakChain
from cloaknet.protocols import SummationProtocol
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.keys import generate_identity
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import node_settings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore

__all__ = ["HOST", "LocalChain", "local_chain"]

#: Every node of a local chain listens on this address.
HOST = "127.0.0.1"
#: Host of the placeholder URLs of nodes not started yet (``.invalid`` never resolves).
_UNSTARTED = "unstarted.invalid"


@dataclass
class LocalChain:
    """A running in-process chain: its chain description (with the nodes' real URLs) and
    its nodes — the mixes in chain order, then the analyzer."""

    chain: CloakChain
    mixes: list[MixNode]
    analyzer: SinkNode

    @property
    def nodes(self) -> list[BaseNode]:
        """All nodes in chain order: the mixes, then the analyzer."""
        return [*self.mixes, self.analyzer]


@contextlib.asynccontextmanager
async def local_chain(
    directory: Path,
    protocol: SummationProtocol,
    policy: RoundPolicy,
    *,
    mixes: int = 3,
    chain_id: str = "local",
    dump_dir: Path | None = None,
) -> AsyncIterator[LocalChain]:
    """Run a chain of ``mixes`` mixes (``mix1`` … ``mixL``, fresh identity keys) and an
    ``analyzer`` running ``protocol``, all on 127.0.0.1 with ephemeral ports, each with its own
    sqlite store ``directory/<name>.db``; yield it as a :class:`LocalChain` and stop every
    node and close every store on exit (also when starting fails midway).

    ``dump_dir`` is passed to the analyzer (see :class:`~cloaknet.analyzer_node.AnalyzerApp`).
    Everything that can be checked is checked before any node starts.

    :raises ValueError: ``mixes < 1``.
    :raises TypeError: ``protocol`` is not a
        :class:`~cloaknet.protocols.base.SummationProtocol`.
    :raises ChainFileError: ``policy`` does not fit the protocol (see
        :class:`~cloaknet.chainfile.CloakChain`).
    :raises ChainConfigError: ``chain_id`` is not a valid name.
    :raises OSError: a store cannot be opened or a node cannot listen.
    """
    if mixes < 1:
        raise ValueError(f"a chain needs at least one mix, got mixes={mixes}")
    names = [*(f"mix{i + 1}" for i in range(mixes)), "analyzer"]
    identities = [generate_identity() for _ in range(mixes)]

    def config_with(urls: Mapping[str, str]) -> ChainConfig:
        def url(hop: int) -> str:
            return urls.get(names[hop], f"ws://{_UNSTARTED}:{hop + 1}")

        return ChainConfig(
            chain_id=chain_id,
            mixes=tuple(
                NodeInfo(names[hop], url(hop), identities[hop].verify_key)
                for hop in range(mixes)
            ),
            sink=NodeInfo(names[mixes], url(mixes), None),
            policy=policy,
            sections={},
            sink_table=SINK_TABLE,
        )

    chain = CloakChain(config_with({}), protocol)
    stores: list[NodeStore] = []
    started: list[BaseNode] = []
    try:
        urls: dict[str, str] = {}
        mix_nodes: list[MixNode] = []
        sink: SinkNode | None = None
        for hop in range(mixes, -1, -1):
            name = names[hop]
            settings = node_settings(
                config_with(urls),
                name,
                messages=chain.messages,
                payload_length=chain.payload_length,
            )
            store = NodeStore(directory / f"{name}.db")
            stores.append(store)
            node: BaseNode
            if hop == mixes:
                sink = analyzer_node(settings, store, protocol, dump_dir=dump_dir)
                node = sink
            else:
                mix = MixNode(settings, store, identities[hop])
                mix_nodes.insert(0, mix)
                node = mix
            port = await node.start(HOST, 0)
            started.append(node)
            urls[name] = f"ws://{HOST}:{port}"
        assert sink is not None
        running = dataclasses.replace(chain, config=config_with(urls))
        yield LocalChain(running, mix_nodes, sink)
    finally:
        for node in reversed(started):
            await node.stop()
        for store in stores:
            store.close()
