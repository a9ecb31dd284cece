"""``cloaknet experiment fl --network``: every training round's update sum through a real
local chain of node processes.

:func:`network_chain` starts, for one planned protocol, a chain of separate OS processes on
127.0.0.1 (:func:`cloaknet.process_chain.process_chain`) whose ``[protocol]`` is the plan
form of that very plan (``name = "vector"``, :func:`cloaknet.vector_table.vector_plan_section`:
every node re-plans it to the same parameters and publishes its guarantee) and whose rounds
close at exactly n users; :class:`ChainAggregator` is the training loop's aggregator over it:
each call submits every client's update with the client library (each client's own clipping,
rounding, Skellam noise and split-and-mix, from the OS CSPRNG; d·m onions per client) and
returns the analyzer's published vector.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

import numpy as np
from numpy.typing import NDArray

from cloaknet.chainfile import load_chain
from cloaknet.client import ChainClient
from cloaknet.errors import CloakError
from cloaknet.fl_accounting import FLPlan
from cloaknet.process_chain import ProcessChain, process_chain
from cloaknet.vector_table import vector_plan_section
from mixnet.chain import RoundPolicy

__all__ = ["ChainAggregator", "NetworkRoundError", "network_chain"]

#: Seconds a round may stay open (it closes when all n clients have submitted).
ROUND_DEADLINE: Final[float] = 3600.0


class NetworkRoundError(CloakError, RuntimeError):
    """A training round through the chain did not give one result for all n clients."""


@contextlib.contextmanager
def network_chain(plan: FLPlan, *, mixes: int = 3) -> Iterator[ProcessChain]:
    """A running chain of ``mixes`` mix processes and the analyzer for ``plan`` (rounds of
    exactly ``plan.users`` users); every process is stopped when the block ends.

    :raises ChainStartError: a node did not start.
    """
    policy = RoundPolicy(
        min_users=plan.users, max_users=plan.max_users, deadline_seconds=ROUND_DEADLINE,
        below_min="wait",
    )
    with process_chain(vector_plan_section(plan), policy, mixes=mixes, chain_id="fl") as chain:
        yield chain


class ChainAggregator:
    """Sums the clients' updates of one training round through a running chain: a callable
    ``(n, d) updates → (d,) estimated sum`` for :func:`cloaknet.experiments.fl.train.train`.

    Use as a context manager (it opens one :class:`~cloaknet.client.ChainClient` on its own
    event loop and closes it on exit). Each call submits all n updates
    (:meth:`~cloaknet.client.ChainClient.submit_many`), checks that they landed in one round,
    waits for the analyzer's result (``timeout`` seconds) and returns its ``vector``.
    ``round_seconds`` and ``client_cpu_seconds`` record each call's wall time and this
    process's CPU time (the clients' encoding and wrapping; the nodes run elsewhere).
    """

    def __init__(
        self, chain_path: Path, users: int, *, timeout: float = ROUND_DEADLINE,
        concurrency: int = 32,
    ) -> None:
        self.chain_path = chain_path
        self.users = users
        self.timeout = timeout
        self.concurrency = concurrency
        self.round_seconds: list[float] = []
        self.client_cpu_seconds: list[float] = []
        self._runner: asyncio.Runner | None = None
        self._client: ChainClient | None = None

    def __enter__(self) -> ChainAggregator:
        runner = asyncio.Runner()
        self._runner = runner
        chain = load_chain(self.chain_path)

        async def open_client() -> ChainClient:
            return ChainClient(chain, connections=4, retry_for=self.timeout)

        self._client = runner.run(open_client())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, client = self._runner, self._client
        self._runner = self._client = None
        if runner is None:
            return
        try:
            if client is not None:
                runner.run(client.aclose())
        finally:
            runner.close()

    def __call__(self, updates: NDArray[np.float64]) -> NDArray[np.float64]:
        """The chain's estimate of the sum of the clipped ``updates`` (one row per client).

        :raises ValueError: not exactly ``users`` rows.
        :raises NetworkRoundError: the submissions landed in several rounds, or the result
            counts another number of users.
        :raises RuntimeError: outside the ``with`` block.
        """
        if self._runner is None or self._client is None:
            raise RuntimeError("use ChainAggregator in a with block")
        rows = np.asarray(updates, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != self.users:
            raise ValueError(f"expected {self.users} update rows, got shape {rows.shape}")
        started, cpu = time.perf_counter(), time.process_time()
        total = self._runner.run(self._round(self._client, rows))
        self.round_seconds.append(time.perf_counter() - started)
        self.client_cpu_seconds.append(time.process_time() - cpu)
        return total

    async def _round(self, client: ChainClient, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        receipts = await client.submit_many(rows, concurrency=self.concurrency)
        rounds = sorted({receipt.round for receipt in receipts})
        if len(rounds) != 1:
            raise NetworkRoundError(f"the clients' updates landed in rounds {rounds}")
        result = await client.result(rounds[0], timeout=self.timeout)
        if result.users != self.users or result.vector is None:
            raise NetworkRoundError(
                f"round {rounds[0]} counted {result.users} users, expected {self.users}"
            )
        return np.array(result.vector, dtype=np.float64)
