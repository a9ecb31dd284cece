"""The Flower example (``examples/flower``) on Flower's own deployment runtime: a SuperLink and
four SuperNodes as processes on 127.0.0.1, the app started with ``flwr run`` (no Ray).

The ServerApp writes what it saw (``out``); the shuffler publishes each round's result in the
spool. The test checks that the model learned (accuracy far above chance), that the server
never received a client's parameters (every train reply was a receipt, no arrays), and that
the aggregate the strategy applied is the analyzer's published sum — which equals the sum of
the four clients' clipped updates, recomputed here from the global models and the public data
split, up to the rounding grid (the noiseless protocol: exact sums of rounded vectors).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr", reason="the Flower extra is not installed: pip install '.[flower]'")

from cloaknet.flower.local import ConfigValue, LocalFederation
from cloaknet.protocols.vector_rounding import clip_vectors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower"
SUPERNODES = 4
ROUNDS = 2


@pytest.fixture
def task(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example's ``cloaknet_digits.task`` module (data split and local training)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    module = importlib.import_module("cloaknet_digits.task")
    yield module
    for name in [n for n in sys.modules if n.startswith("cloaknet_digits")]:
        del sys.modules[name]


@pytest.mark.slow
def test_flower_example_on_the_local_deployment_runtime(tmp_path: Path, task: Any) -> None:
    spool, out = tmp_path / "spool", tmp_path / "out.json"
    config: dict[str, ConfigValue] = {"spool": str(spool), "out": str(out), "privacy": "none",
              "clients": SUPERNODES, "num-server-rounds": ROUNDS}
    with LocalFederation(tmp_path / "flower", SUPERNODES) as federation:
        run = federation.run(EXAMPLE, config, timeout=240)
    assert run.completed, f"run {run.run_id}: {run.status}\n{run.log[-4000:]}"
    assert out.exists(), run.log[-4000:]
    result = json.loads(out.read_text())

    # the model learned: 10 classes, chance is 0.1
    assert result["accuracy"][0] < 0.3
    assert result["final_accuracy"] >= 0.8

    rounds = result["per_round"]
    assert len(rounds) == ROUNDS
    scale = float(result["protocol"]["scale"])
    lr = float(result["server_learning_rate"])
    seed = 0
    for i, record in enumerate(rounds):
        # the server got one receipt per client and never a model array
        assert (record["replies"], record["failures"], record["arrays_received"]) == (
            SUPERNODES, 0, 0)
        assert record["aborted"] is None and record["users"] == SUPERNODES
        # what it applied is the analyzer's published sum, and nothing else
        published = json.loads((spool / record["round_tag"] / "result.json").read_text())
        assert published["users"] == SUPERNODES
        assert record["total"] == published["estimate"]
        assert sorted(spool.joinpath(record["round_tag"]).iterdir()) == [
            spool / record["round_tag"] / "result.json"]  # the clients' shares are erased
        total = np.asarray(record["total"])
        assert np.array_equal(np.asarray(record["step"]), lr * total / SUPERNODES)
        # ... which is the sum of the clients' clipped updates, recomputed independently
        w = np.asarray(record["global"])
        updates = np.stack([
            task.train(w, *task.partition(seed, k, SUPERNODES), steps=5, learning_rate=1.0) - w
            for k in range(SUPERNODES)
        ])
        expected = clip_vectors(updates, 1.0).sum(axis=0)
        assert np.max(np.abs(total - expected)) <= SUPERNODES / scale + 1e-9
        # and the next round starts from w + step
        if i + 1 < len(rounds):
            assert np.allclose(rounds[i + 1]["global"], w + record["step"], rtol=0, atol=1e-12)
