"""A whole chain — L mixes and the analyzer — in one event loop, on ephemeral loopback ports.

For tests and experiments that want real sockets, real crypto and real sqlite without
separate processes (the ``cloaknet demo`` command runs separate processes instead): the
generic :func:`mixnet.localchain.run_local_chain` with the analyzer as its sink.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from cloaknet.analyzer_node import analyzer_node
from cloaknet.chainfile import SINK_TABLE, CloakChain
from cloaknet.protocols import SummationProtocol
from cloaknet.validator import payload_validator
from mixnet.admission import Admission
from mixnet.chain import ChainConfig, RoundPolicy
from mixnet.limits import DEFAULT_LIMITS, Limits
from mixnet.localchain import HOST, LocalTls, run_local_chain
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import NodeSettings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore

__all__ = ["HOST", "LocalChain", "LocalTls", "local_chain"]


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
    limits: Limits = DEFAULT_LIMITS,
    tls: LocalTls | None = None,
    admission: Admission | None = None,
    ownership_proofs: bool = False,
) -> AsyncIterator[LocalChain]:
    """Run a chain of ``mixes`` mixes (``mix1`` … ``mixL``, fresh identity keys) and an
    ``analyzer`` running ``protocol``, all on 127.0.0.1 with ephemeral ports, each with its own
    sqlite store ``directory/<name>.db``; yield it as a :class:`LocalChain` and stop every
    node and close every store on exit (also when starting fails midway).

    ``dump_dir`` is passed to the analyzer (see :class:`~cloaknet.analyzer_node.AnalyzerApp`).
    ``limits`` is the chain's ``[limits]``; with ``tls`` every node serves ``wss://`` and
    the chain (hence :func:`cloaknet.client.connect`) trusts ``tls.ca``
    (:class:`~mixnet.localchain.LocalTls`); ``ownership_proofs`` sets the chain's
    ``[chain] ownership_proofs``. Everything that can be checked is checked before any node
    starts.

    :raises ValueError: ``mixes < 1``.
    :raises TypeError: ``protocol`` is not a
        :class:`~cloaknet.protocols.base.SummationProtocol`.
    :raises ChainFileError: ``policy`` does not fit the protocol (see
        :class:`~cloaknet.chainfile.CloakChain`).
    :raises ChainConfigError: ``chain_id`` is not a valid name.
    :raises TlsError: ``tls.ca`` cannot be read.
    :raises OSError: a store cannot be opened or a node cannot listen.
    """
    if not isinstance(protocol, SummationProtocol):
        raise TypeError(f"protocol must be a SummationProtocol, not {type(protocol).__name__}")

    def check(config: ChainConfig) -> CloakChain:
        return CloakChain(config, protocol)

    def make_sink(settings: NodeSettings, store: NodeStore) -> SinkNode:
        return analyzer_node(settings, store, protocol, dump_dir=dump_dir)

    async with run_local_chain(
        directory,
        make_sink,
        policy,
        messages=protocol.message_count,
        payload_length=protocol.bytes_per_message,
        mixes=mixes,
        chain_id=chain_id,
        sink_name="analyzer",
        sink_table=SINK_TABLE,
        check=check,
        limits=limits,
        tls=tls,
        admission=admission,
        ownership_proofs=ownership_proofs,
        validator=payload_validator(protocol),
    ) as running:
        yield LocalChain(CloakChain(running.config, protocol), running.mixes, running.sink)
