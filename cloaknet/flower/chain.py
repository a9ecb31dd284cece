"""The chain transport: updates through the cascade mixnet, the sum from the analyzer node.

Uses the vector API of :mod:`cloaknet.client`: a chain file whose ``[protocol]`` is
``name = "vector"`` (:mod:`cloaknet.vector_table`; ``chain.protocol`` is a
:class:`~cloaknet.protocols.vector_chain.VectorChainProtocol` wrapping the
:class:`~cloaknet.protocols.vector.VectorSumProtocol`), ``ChainClient.submit(vector)``
returning a :class:`~cloaknet.client.Receipt` with ``.round``, and
``ChainClient.result(round_id)`` returning a :class:`~cloaknet.client.RoundResult` whose
``.vector`` holds the analyzer's d coordinate sums.

The client's ``ChainClient`` runs the local randomizer (clip, round, noise, split) and wraps
every share in one onion layer per mix; the entry mix has stored the submission when
:meth:`ChainTransport.submit` returns. The chain, not the server, decides the rounds: a round
closes when ``[round].max_users`` submissions are in, or at its deadline with at least
``min_users`` (otherwise it aborts). Give ``[round]`` ``max_users`` = the clients per Flower
round, so that a round closes as soon as all are in; the server's round tag is then only a
label. :meth:`ChainTransport.aggregate` requires every receipt to name one chain round and
returns the analyzer's user count, which the strategy divides by.

Each call opens a client and closes it again (under Flower's deployment runtime every message
runs in a fresh process anyway). Flower calls mods and strategies synchronously; the
coroutines run with ``asyncio.run`` (:func:`run_sync`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from cloaknet.chainfile import CloakChain, load_chain
from cloaknet.client import ChainClient, RoundFailed, connect
from cloaknet.client import RoundAborted as ChainRoundAborted
from cloaknet.flower.records import Receipt
from cloaknet.flower.transport import Aggregate, RoundAborted, RoundMismatch, TransportError
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.protocols.vector_rounding import as_rows

__all__ = ["ChainTransport", "run_sync"]

_T = TypeVar("_T")


def run_sync(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run the coroutine ``make()`` to completion from synchronous code: ``asyncio.run`` in
    this thread, or in a worker thread if this thread already runs an event loop (which
    then waits: a chain served by *that* loop must be called from another thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


class ChainTransport:
    """A :class:`~cloaknet.flower.transport.Transport` over a cloaknet chain (module doc).

    ``chain``: the chain file (the same one the nodes run) or a loaded
    :class:`~cloaknet.chainfile.CloakChain`; ``client_options`` go to
    :class:`cloaknet.client.ChainClient` (e.g. ``credential=`` and ``token=`` on a chain
    with ``[admission]``, ``retry_for=``).

    :raises ChainFileError: the chain file is unreadable or invalid.
    :raises TransportError: its ``[protocol]`` is not a vector protocol.
    """

    def __init__(
        self,
        chain: str | os.PathLike[str] | CloakChain,
        *,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.chain = chain if isinstance(chain, CloakChain) else load_chain(Path(chain))
        protocol: object = self.chain.protocol
        if isinstance(protocol, VectorChainProtocol):
            protocol = protocol.vector
        if not isinstance(protocol, VectorSumProtocol):
            raise TransportError(
                f"the chain's [protocol] is {type(protocol).__name__}, not a vector protocol "
                "(name = \"vector\")"
            )
        self._protocol = protocol
        self._options = dict(client_options or {})

    @property
    def name(self) -> str:
        return "chain"

    @property
    def protocol(self) -> VectorSumProtocol:
        return self._protocol

    def __repr__(self) -> str:
        return f"ChainTransport({self.chain.config.chain_id!r}, {self._protocol!r})"

    async def _use(self, call: Callable[[ChainClient], Awaitable[_T]]) -> _T:
        async with connect(self.chain, **self._options) as net:
            return await call(net)

    def submit(self, round_tag: str, update: NDArray[np.float64]) -> Receipt:
        """Submit ``update`` into the chain's open round (the chain's client clips, rounds,
        noises and splits it); ``round_tag`` is not sent (module doc).

        :raises InputRangeError: wrong shape or a non-finite value.
        :raises SubmissionRejected, OSError, TimeoutError: as ``ChainClient.submit``.
        """
        vector = as_rows(update, self._protocol.dimension)[0]
        receipt = run_sync(lambda: self._use(lambda net: net.submit(vector)))
        return Receipt(round=str(receipt.round), digest=receipt.digest.hex(),
                       transport=self.name)

    def aggregate(
        self, round_tag: str, receipts: Sequence[Receipt], *, timeout: float = 600.0
    ) -> Aggregate:
        """The analyzer's result for the one chain round all ``receipts`` name.

        :raises RoundMismatch: no receipts, receipts of another transport, or of several
            chain rounds.
        :raises RoundAborted: the chain aborted the round.
        :raises TransportError: the analyzer failed the round or published no vector.
        :raises TimeoutError: no result within ``timeout`` seconds.
        """
        rounds = {r.round for r in receipts}
        if len(rounds) != 1 or any(r.transport != self.name for r in receipts):
            raise RoundMismatch(f"expected receipts of one chain round, got rounds {rounds}")
        try:
            round_id = int(rounds.pop())
        except ValueError as exc:
            raise RoundMismatch(f"a chain round id must be an integer: {exc}") from exc
        try:
            result = run_sync(lambda: self._use(
                lambda net: net.result(round_id, timeout=timeout)))
        except ChainRoundAborted as exc:
            raise RoundAborted(f"chain round {round_id} was aborted") from exc
        except RoundFailed as exc:
            raise TransportError(f"chain round {round_id} failed: {exc}") from exc
        if result.vector is None:
            raise TransportError(f"chain round {round_id}: the analyzer published no vector")
        total = np.asarray(result.vector, dtype=np.float64)
        if total.shape != (self._protocol.dimension,):
            raise TransportError(f"chain round {round_id}: a vector of shape {total.shape}")
        return Aggregate(str(round_id), int(result.users), total, dict(result.raw))
