"""Vector sums through a real chain of node processes (``cloaknet node`` on 127.0.0.1):
exact in every coordinate without noise, and the FL experiment's chain aggregator."""

from __future__ import annotations

import json
import math
import urllib.request

import numpy as np
import pytest

from cloaknet.client import connect
from cloaknet.experiments.fl.network import ChainAggregator, network_chain
from cloaknet.fl_accounting import plan_fl
from cloaknet.process_chain import HOST, process_chain
from cloaknet.protocols.vector import VectorParams
from cloaknet.vector_table import vector_section
from mixnet.chain import RoundPolicy

pytestmark = pytest.mark.slow

USERS = 4
DIMENSION = 12
#: No noise, s = 64 (a power of two): vectors on the 1/64 grid with norm <= C are rounded to
#: themselves, and their sums are exact binary64 values.
PARAMS = VectorParams.noiseless(DIMENSION, 1.0, 64.0, users=USERS)


def _strict_json(text: bytes) -> object:
    """Parse JSON, refusing NaN and ±Infinity (which ``json.loads`` accepts by default)."""

    def refuse(name: str) -> object:
        raise ValueError(f"not valid JSON: {name}")

    return json.loads(text, parse_constant=refuse)


async def test_vector_sums_through_node_processes_are_exact() -> None:
    gen = np.random.default_rng(11)
    steps = int(PARAMS.scale / math.sqrt(DIMENSION))  # norm <= 1: no clipping
    vectors = gen.integers(-steps, steps + 1, size=(USERS, DIMENSION)) / PARAMS.scale
    vectors[0, :] = 0.0  # an all-zero update is a vector too
    policy = RoundPolicy(min_users=USERS, max_users=USERS, deadline_seconds=60.0)
    with process_chain(vector_section(PARAMS), policy, mixes=3) as chain:
        async with connect(chain.chain_path, retry_for=20.0) as client:
            assert client.vector is not None and client.vector.dimension == DIMENSION
            # one submission through submit(), the rest through submit_many()
            first = await client.submit(vectors[0].tolist())
            rest = await client.submit_many(vectors[1:])
            assert {r.round for r in rest} == {first.round}
            result = await client.result(first.round, timeout=20.0)
        assert result.users == USERS and result.vector is not None
        expected = vectors.sum(axis=0)
        assert len(result.vector) == DIMENSION
        for coordinate, (got, want) in enumerate(zip(result.vector, expected, strict=True)):
            assert got == want, f"coordinate {coordinate}: {got} != {want}"
        assert result.estimate == float(np.sum(vectors))
        assert result.raw["messages"] == USERS * DIMENSION * PARAMS.messages
        assert result.raw["epsilon"] is None  # explicit parameters state no guarantee
        port = chain.ports[-1]
        for path in (f"/rounds/{first.round}", "/status", "/rounds"):
            with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=5) as reply:
                body = _strict_json(reply.read())
            assert isinstance(body, dict | list)
        with urllib.request.urlopen(f"http://{HOST}:{port}/rounds/{first.round}") as reply:
            published = _strict_json(reply.read())
        assert isinstance(published, dict) and published["vector"] == list(result.vector)


def test_chain_aggregator_sums_a_training_round() -> None:
    made = plan_fl(8, 1.0, 2, 3.0, 1e-5, 5)  # the FL experiment's plan, tiny
    updates = np.random.default_rng(5).normal(size=(5, 8))
    clipped = updates / np.maximum(1.0, np.linalg.norm(updates, axis=1, keepdims=True))
    with network_chain(made, mixes=2) as chain, ChainAggregator(
        chain.chain_path, 5, timeout=30.0
    ) as aggregate:
        first = aggregate(updates)
        second = aggregate(updates)
        status = chain.status("analyzer")
        with pytest.raises(ValueError, match="expected 5 update rows"):
            aggregate(updates[:4])  # refused before anything is sent
    assert first.shape == second.shape == (8,)
    bound = 6.0 * made.predicted_rmse  # a 6σ band per coordinate
    assert np.all(np.abs(first - clipped.sum(axis=0)) <= bound)
    assert np.all(np.abs(second - clipped.sum(axis=0)) <= bound)
    assert len(aggregate.round_seconds) == 2 and min(aggregate.round_seconds) > 0
    assert isinstance(status, dict)
    with pytest.raises(RuntimeError, match="with block"):
        aggregate(updates)
