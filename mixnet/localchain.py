"""A whole chain — L mixes and a sink — in one event loop, on ephemeral loopback ports.

For tests, experiments and drivers that want real sockets, real crypto and real sqlite
without separate processes. Each node's settings come from
:func:`mixnet.settings.node_settings` applied to the chain's configuration, exactly as a node
process derives them from a chain file. Ports are only known once a node is listening, so
nodes are started from the sink backwards: each mix is configured after its successor has
bound its port, and nodes not started yet are listed at a placeholder address
(``ws://unstarted.invalid:<hop + 1>``) that no settings ever use. With :class:`LocalTls`
every node serves ``wss://`` with one certificate for 127.0.0.1 and the chain's ``[tls]``
names the CA that signed it.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nacl.signing import SigningKey

from mixnet.admission import Admission
from mixnet.blame import PayloadValidator, accept_all
from mixnet.chain import DEFAULT_SINK_TABLE, ChainConfig, NodeInfo
from mixnet.core.policy import RoundPolicy
from mixnet.keys import generate_identity
from mixnet.limits import DEFAULT_LIMITS, Limits
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import NodeSettings, node_settings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore
from mixnet.tls import TlsConfig

__all__ = ["HOST", "LocalTls", "RunningChain", "run_local_chain"]

#: Every node of a local chain listens on this address.
HOST = "127.0.0.1"
#: Host of the placeholder URLs of nodes not started yet (``.invalid`` never resolves).
_UNSTARTED = "unstarted.invalid"

#: Builds the sink node from its settings and store (the application is the caller's).
SinkFactory = Callable[[NodeSettings, NodeStore], SinkNode]


@dataclass(frozen=True)
class LocalTls:
    """TLS for a local chain: ``ca``, the CA bundle (PEM file) the chain trusts, and
    ``server``, the server context every node serves with (its certificate must be valid
    for 127.0.0.1 and signed by ``ca``)."""

    ca: Path
    server: ssl.SSLContext


@dataclass
class RunningChain:
    """A running in-process chain: its configuration (with the nodes' real URLs), its nodes,
    the mixes' identity keys by name and the nodes' stores."""

    config: ChainConfig
    mixes: list[MixNode]
    sink: SinkNode
    identities: dict[str, SigningKey]
    stores: list[NodeStore]

    @property
    def nodes(self) -> list[BaseNode]:
        """All nodes in chain order: the mixes, then the sink."""
        return [*self.mixes, self.sink]


@contextlib.asynccontextmanager
async def run_local_chain(
    directory: Path,
    make_sink: SinkFactory,
    policy: RoundPolicy,
    *,
    messages: int,
    payload_length: int,
    mixes: int = 3,
    chain_id: str = "local",
    sink_name: str = "sink",
    sink_table: str = DEFAULT_SINK_TABLE,
    check: Callable[[ChainConfig], object] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    tls: LocalTls | None = None,
    validator: PayloadValidator = accept_all,
    admission: Admission | None = None,
    ownership_proofs: bool = False,
    peel_processes: int = 0,
) -> AsyncIterator[RunningChain]:
    """Run ``mixes`` mixes (``mix1`` … ``mixL``, fresh identity keys) and a sink built by
    ``make_sink``, all on 127.0.0.1 with ephemeral ports, each with its own sqlite store
    ``directory/<name>.db``; yield them and stop every node and close every store on exit
    (also when starting fails midway). ``check`` is called with the chain's configuration
    before any node starts (to refuse what the application cannot run). ``limits`` is the
    chain's ``[limits]``; with ``tls`` every node serves ``wss://`` (see :class:`LocalTls`);
    ``validator`` is the application's payload check, run by the mixes (the last mix on its
    outputs, every mix on the payloads of accusations); ``admission`` the chain's
    ``[admission]`` (``None``: anyone may submit); ``ownership_proofs`` its
    ``[chain] ownership_proofs``; ``peel_processes`` how many worker processes each mix peels
    in (0: threads of this process, as by default; see
    :func:`~mixnet.settings.node_settings`).

    :raises ValueError: ``mixes < 1``, ``messages < 1`` or ``payload_length < 1``.
    :raises TlsError: ``tls.ca`` cannot be read.
    :raises ChainConfigError: ``chain_id``, ``sink_name`` or ``sink_table`` is invalid.
    :raises OSError: a store cannot be opened or a node cannot listen.
    """
    if mixes < 1:
        raise ValueError(f"a chain needs at least one mix, got mixes={mixes}")
    names = [*(f"mix{i + 1}" for i in range(mixes)), sink_name]
    identities = [generate_identity() for _ in range(mixes)]
    scheme = "ws" if tls is None else "wss"
    tls_config = None if tls is None else TlsConfig(tls.ca)
    if tls_config is not None:
        tls_config.client_context()  # an unreadable CA fails here, before anything starts

    def config_with(urls: Mapping[str, str]) -> ChainConfig:
        def url(hop: int) -> str:
            return urls.get(names[hop], f"{scheme}://{_UNSTARTED}:{hop + 1}")

        return ChainConfig(
            chain_id=chain_id,
            mixes=tuple(
                NodeInfo(names[hop], url(hop), identities[hop].verify_key)
                for hop in range(mixes)
            ),
            sink=NodeInfo(names[mixes], url(mixes), None),
            policy=policy,
            sections={},
            sink_table=sink_table,
            tls=tls_config,
            limits=limits,
            admission=admission,
            ownership_proofs=ownership_proofs,
        )

    if check is not None:
        check(config_with({}))
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
                messages=messages,
                payload_length=payload_length,
                peel_processes=peel_processes,
            )
            store = NodeStore(directory / f"{name}.db")
            stores.append(store)
            node: BaseNode
            if hop == mixes:
                sink = make_sink(settings, store)
                node = sink
            else:
                mix = MixNode(settings, store, identities[hop], validator=validator)
                mix_nodes.insert(0, mix)
                node = mix
            port = await node.start(HOST, 0, tls=None if tls is None else tls.server)
            started.append(node)
            urls[name] = f"{scheme}://{HOST}:{port}"
        assert sink is not None
        trust = None if tls_config is None else tls_config.client_context()
        sink.show_chain(config_with(urls), ssl_context=trust)
        yield RunningChain(
            config_with(urls),
            mix_nodes,
            sink,
            dict(zip(names, identities, strict=False)),
            stores,
        )
    finally:
        for node in reversed(started):
            await node.stop()
        for store in stores:
            store.close()
