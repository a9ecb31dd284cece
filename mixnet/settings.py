"""A node's place in the chain, derived from the chain configuration (nothing else builds it).

:func:`node_settings` turns a :class:`~mixnet.chain.ChainConfig`, a node name and the
application's message shape (how many payloads make one submission, and their length) into
:class:`NodeSettings`: hop, predecessor and its identity, successor URL, the round policy,
the node's own URL, the CA bundle its link trusts, the connection limits it enforces and
who may submit (the ``[admission]`` table, enforced by the entry mix).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nacl.signing import VerifyKey

from mixnet.accusation_wire import MAX_PAGE_COUNT
from mixnet.admission import Admission
from mixnet.blame import SECRET_LENGTH, Accusation, Failure, Step
from mixnet.chain import ChainConfig, ChainConfigError
from mixnet.chunk_signature import SIGNATURE_LENGTH, Delivery
from mixnet.core.policy import RoundPolicy
from mixnet.core.trace_caps import accusation_cap, exclude_cap
from mixnet.dleq import PROOF_LENGTH
from mixnet.frames import Accused, FrameLimits, to_wire
from mixnet.limits import DEFAULT_LIMITS, Limits
from mixnet.onion import onion_length, submission_length
from mixnet.submit_many import SUBMISSION_WIRE_SLACK
from mixnet.tls import TlsConfig
from mixnet.trace_signature import PageProof
from mixnet.wire import MAX_NAME_LENGTH, encode_frame

__all__ = ["FRAME_SLACK", "NodeSettings", "node_settings"]

#: Bytes of frame overhead allowed on top of the payload bytes a frame carries.
FRAME_SLACK = 64 * 1024


@dataclass(frozen=True)
class NodeSettings:
    """What a node needs to know about its place in the chain.

    ``hop`` is the node's index (0 .. hops−1 for mixes, ``hops`` for the sink);
    ``payload_length`` is the length in bytes of the plaintext payload at the end of the
    chain; ``messages`` the number of inner onions in one client submission box; ``workers`` the
    threads that peel, prove and permute; ``peel_processes`` the worker processes that peel
    instead (:class:`~mixnet.peel_processes.PeelProcesses`; 0: peeling runs in the
    ``workers`` threads, as in an embedded node or a test). ``url`` is the node's own URL in
    the chain file (``wss://``: it must serve TLS), ``tls`` the chain's ``[tls]`` table (the
    CA bundle its forward link trusts; ``None``: the system's CAs), ``connection_limits`` the
    ``[limits]`` it enforces and ``admission`` the chain's ``[admission]`` (``None``: anyone
    may submit; only the entry mix looks at it).
    """

    chain_id: str
    name: str
    hop: int
    hops: int
    predecessor: str | None
    predecessor_identity: VerifyKey | None
    successor_url: str | None
    messages: int
    payload_length: int
    policy: RoundPolicy
    workers: int = max(2, os.cpu_count() or 2)
    peel_processes: int = 0
    url: str = ""
    tls: TlsConfig | None = None
    connection_limits: Limits = DEFAULT_LIMITS
    #: the successor's name (``None`` at the sink)
    successor: str | None = None
    admission: Admission | None = None
    #: the chain's layers after the entry mix's carry ownership proofs
    ownership_proofs: bool = False
    #: every mix's (name, 32-byte Ed25519 identity public key), in chain order: what signed
    #: chunks are checked and judged against (:mod:`mixnet.core.deliveries`)
    mix_identities: tuple[tuple[str, bytes], ...] = ()

    @property
    def is_sink(self) -> bool:
        return self.hop == self.hops

    def item_length_in(self) -> int:
        """Length of each item this node receives: at the entry mix a submission box
        (:func:`mixnet.onion.submission_length`), elsewhere an onion with ``hops - hop``
        layers."""
        if self.hop == 0:
            return submission_length(
                self.payload_length, self.hops, self.messages, proven=self.ownership_proofs
            )
        return onion_length(self.payload_length, self.hops - self.hop, proven=self.ownership_proofs)

    def item_length_out(self) -> int:
        """Length of each item this node sends on."""
        layers = max(0, self.hops - self.hop - 1)
        return onion_length(self.payload_length, layers, proven=self.ownership_proofs)

    def max_frame(self) -> int:
        """Largest frame this node accepts, in bytes: at the entry mix a ``submit-many``
        frame of ``[limits].max_submissions_per_frame`` boxes; at a later mix a batch chunk or
        an ``exclude`` frame (:func:`~mixnet.core.trace_caps.exclude_cap` items), whichever is
        larger; at the sink a batch chunk."""
        if self.hop == 0:
            per_frame = self.connection_limits.max_submissions_per_frame
            return per_frame * (self.item_length_in() + SUBMISSION_WIRE_SLACK) + FRAME_SLACK
        items = self.policy.chunk_size if self.is_sink else self._exclude_items()
        return items * (self.item_length_in() + 8) + FRAME_SLACK

    def _exclude_items(self) -> int:
        return exclude_cap(self.policy.chunk_size, self.messages)

    def successor_max_frame(self) -> int:
        """Largest reply or frame expected over the link to the successor, in bytes: a chunk
        of this node's items, or the successor's longest ``accused`` reply
        (:meth:`accused_reply_length`), whichever is longer, plus :data:`FRAME_SLACK`."""
        chunk = self.policy.chunk_size * (self.item_length_out() + 8)
        return max(chunk, self.accused_reply_length()) + FRAME_SLACK

    def accused_reply_length(self) -> int:
        """Bytes of the longest ``accused`` reply an honest successor mix sends this node (0
        when the successor is the sink), encoded, with the widest integers: a page of as many
        accusations as it may name (:func:`~mixnet.core.trace_caps.accusation_cap` at its
        hop), each with a step at every hop from the successor's to the last mix's (that
        hop's item, a revealed secret and its proof) and a delivery by this node (a
        signature and an audit path in a chunk), with the page's signature; or a blame: one
        such accusation as evidence, its proof on a page (an audit path as long as a page's),
        a refusal and, for a ``duplicate``, the whole page it was on."""
        first = self.hop + 1
        if self.hop >= self.hops or first >= self.hops:
            return 0
        steps = tuple(
            Step(hop, bytes(self._item_length_at(hop)), bytes(SECRET_LENGTH), bytes(PROOF_LENGTH))
            for hop in range(first, self.hops)
        )
        widest = (1 << 32) - 1  # chunk index and count are signed as u32
        path = (bytes(32),) * (self.policy.chunk_size - 1).bit_length()
        signature = bytes(SIGNATURE_LENGTH)
        delivery = Delivery(self.name, widest, widest, widest - 1, path, signature)
        failure = max(Failure, key=lambda f: len(f.value))
        one = Accusation(failure, steps, delivery)
        cap = accusation_cap(self.policy.chunk_size, first + 1)

        def length(count: int) -> int:
            page = Accused(widest, (one,) * count, widest, signature=signature)
            return len(encode_frame(to_wire(page)))

        each = length(2) - length(1)
        on_page = PageProof(MAX_PAGE_COUNT, MAX_PAGE_COUNT - 1, path, signature)
        blame = Accused(
            widest, untraced=widest, blame="m" * MAX_NAME_LENGTH, evidence=one,
            proof=on_page, refusal=signature, evidence_page=(one,) * cap,
        )  # fmt: skip
        return max(length(1) + (cap - 1) * each, len(encode_frame(to_wire(blame))))

    def _item_length_at(self, hop: int) -> int:
        """Length of the onions mix ``hop`` (after the entry mix) receives."""
        return onion_length(self.payload_length, self.hops - hop, proven=self.ownership_proofs)

    def limits(self) -> FrameLimits:
        """What incoming requests and the successor's replies may hold."""
        return FrameLimits(
            chain_id=self.chain_id,
            submission_length=self.item_length_in(),
            item_length=self.item_length_in(),
            chunk_items=self.policy.chunk_size,
            announcements=self.hops,
            mixes=self.hops,
            exclude_items=self._exclude_items(),
        )


def node_settings(
    config: ChainConfig,
    name: str,
    *,
    messages: int,
    payload_length: int,
    peel_processes: int = 0,
) -> NodeSettings:
    """The settings of node ``name`` in ``config`` for payloads of ``payload_length`` bytes,
    ``messages`` per submission, peeling in ``peel_processes`` worker processes (0: in
    threads; the sink peels nothing and ignores it).

    :raises ChainConfigError: ``name`` is not a node of the chain (field ``name``).
    :raises ValueError: ``messages < 1``, ``payload_length < 1`` or ``peel_processes < 0``.
    """
    if messages < 1 or payload_length < 1:
        raise ValueError("messages and payload_length must be >= 1")
    if peel_processes < 0:
        raise ValueError(f"peel_processes must be >= 0, got {peel_processes}")
    mixes = config.mixes
    names = [m.name for m in mixes] + [config.sink.name]
    if name not in names:
        raise ChainConfigError(
            f"no node named {name!r} in the chain (nodes: {', '.join(names)})", field="name"
        )
    hop = names.index(name)
    hops = len(mixes)
    successor = None
    if hop < hops:
        successor = mixes[hop + 1].url if hop + 1 < hops else config.sink.url
    return NodeSettings(
        chain_id=config.chain_id,
        name=name,
        hop=hop,
        hops=hops,
        predecessor=None if hop == 0 else names[hop - 1],
        predecessor_identity=None if hop == 0 else mixes[hop - 1].identity,
        successor_url=successor,
        messages=messages,
        payload_length=payload_length,
        policy=config.policy,
        url=config.nodes[hop].url,
        tls=config.tls,
        connection_limits=config.limits,
        successor=names[hop + 1] if hop < hops else None,
        admission=config.admission,
        ownership_proofs=config.ownership_proofs,
        mix_identities=tuple(
            (m.name, bytes(m.identity)) for m in mixes if m.identity is not None
        ),
        peel_processes=peel_processes if hop < hops else 0,
    )
