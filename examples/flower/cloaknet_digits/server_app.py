"""The example's ServerApp: :class:`CloaknetFedAvg` with central evaluation on held-out data.

With ``out`` set in the run config it writes one JSON object: the settings, the protocol,
the final accuracy and, per round, the global model it sent, the analyzer's sum, the step it
took, what it received (receipts, arrays — always 0), and the privacy spent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from cloaknet.flower import CloaknetFedAvg, transport_from_run_config
from cloaknet.flower.strategy import RoundRecord
from cloaknet_digits.task import DIMENSION, evaluate, initial_record, to_vector

app = ServerApp()


def _round_json(record: RoundRecord, sent: list[float]) -> dict[str, Any]:
    spent = record.spent
    return {
        "server_round": record.server_round,
        "round_tag": record.round_tag,
        "global": sent,
        "replies": record.replies,
        "failures": record.failures,
        "arrays_received": record.arrays_received,
        "aborted": record.aborted,
        "users": record.users,
        "total": None if record.total is None else record.total.tolist(),
        "step": None if record.step is None else record.step.tolist(),
        "receipts": [r.round for r in record.receipts],
        "epsilon": None if spent is None or math.isinf(spent.epsilon) else spent.epsilon,
        "delta": None if spent is None else spent.delta,
    }


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train for ``num-server-rounds`` rounds and report (module doc)."""
    config = context.run_config
    seed = int(config["data-seed"])
    rounds = int(config["num-server-rounds"])
    transport = transport_from_run_config(config, DIMENSION)
    strategy = CloaknetFedAvg(transport,
                              server_learning_rate=float(config["server-learning-rate"]))
    sent: list[list[float]] = []
    accuracy: dict[int, float] = {}

    def central_evaluation(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        accuracy[server_round] = evaluate(to_vector(arrays), seed)
        if server_round < rounds:
            sent.append(to_vector(arrays).tolist())  # the model round server_round + 1 uses
        return MetricRecord({"accuracy": accuracy[server_round]})

    result = strategy.start(grid=grid, initial_arrays=initial_record(seed), num_rounds=rounds,
                            train_config=ConfigRecord(), evaluate_fn=central_evaluation)
    if str(config["out"]):
        protocol = transport.protocol
        out = {
            "rounds": rounds,
            "transport": transport.name,
            "protocol": protocol.describe(),
            "accuracy": [accuracy[r] for r in sorted(accuracy)],
            "final_accuracy": evaluate(to_vector(result.arrays), seed),
            "server_learning_rate": strategy.server_learning_rate,
            "per_round": [_round_json(r, sent[i]) for i, r in enumerate(strategy.records)],
        }
        Path(str(config["out"])).write_text(json.dumps(out, default=str))
