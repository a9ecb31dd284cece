"""Link authentication at a node: which connection is its predecessor.

A mix takes ``open-round``, ``abort-round``, ``batch``, ``trace`` and ``exclude`` only from
its predecessor, proven by a challenge–response (``docs/wire.md`` § 8.4): the peer asks for a
fresh nonce (``challenge``) and answers with the predecessor identity key's signature over it
(``authenticate``). :class:`PeerAuthenticator` keeps the open challenges and the
authenticated connections of one node; the node forgets a connection when it closes.
"""

from __future__ import annotations

import secrets

from websockets.asyncio.server import ServerConnection

from mixnet.errors import Unauthorized
from mixnet.frames import parse_authenticate
from mixnet.keys import CHALLENGE_LENGTH, verify_link_signature
from mixnet.limits import ConnectionGuard
from mixnet.settings import NodeSettings

__all__ = ["PeerAuthenticator"]


class PeerAuthenticator:
    """The challenges and authenticated peers of the node with ``settings``; a peer that
    authenticates is reported to ``guard`` (it is then never evicted as idle)."""

    def __init__(self, settings: NodeSettings, guard: ConnectionGuard) -> None:
        self.settings = settings
        self.guard = guard
        self._challenges: dict[ServerConnection, bytes] = {}
        self._peers: dict[ServerConnection, str] = {}

    def challenge(self, conn: ServerConnection) -> dict[str, object]:
        """The ``challenge`` reply: a fresh nonce for ``conn`` (replacing any earlier one)."""
        nonce = secrets.token_bytes(CHALLENGE_LENGTH)
        self._challenges[conn] = nonce
        return {"type": "challenge", "nonce": nonce}

    def authenticate(self, conn: ServerConnection, raw: dict[str, object]) -> dict[str, object]:
        """Check an ``authenticate`` frame against ``conn``'s challenge (used once) and mark
        ``conn`` as the predecessor; returns the ``authenticated`` reply.

        :raises Unauthorized: no challenge was asked, or the node named is not the
            predecessor (or this node has none).
        :raises MalformedFrame, BadLength: the frame is malformed.
        :raises BadSignature: the signature does not verify.
        """
        frame = parse_authenticate(raw)
        node, signature = frame.node, frame.signature
        nonce = self._challenges.pop(conn, None)
        identity = self.settings.predecessor_identity
        if nonce is None:
            raise Unauthorized("ask for a challenge first")
        if node != self.settings.predecessor or identity is None:
            raise Unauthorized(f"{node!r} is not this node's predecessor")
        verify_link_signature(
            identity, signature, chain_id=self.settings.chain_id, node=node, challenge=nonce
        )
        self._peers[conn] = node
        self.guard.authenticated(conn)
        return {"type": "authenticated", "node": node}

    def require_predecessor(self, conn: ServerConnection) -> None:
        """:raises Unauthorized: ``conn`` has not authenticated as the predecessor."""
        if self.settings.predecessor_identity is None:
            raise Unauthorized("this node has no predecessor identity configured")
        if self._peers.get(conn) != self.settings.predecessor:
            raise Unauthorized("only the predecessor may send this frame; authenticate first")

    def forget(self, conn: ServerConnection) -> None:
        """``conn`` closed: drop its challenge and authentication."""
        self._challenges.pop(conn, None)
        self._peers.pop(conn, None)
