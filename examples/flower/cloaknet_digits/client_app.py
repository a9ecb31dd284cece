"""The example's ClientApp: local training, with :class:`CloaknetMod` sending the update.

The train function below is plain Flower: it returns the locally trained model. The mod turns
that into Δ = w′ − w, sends Δ through cloaknet (clipped, rounded, noised, split into shares) and
replies to the server with a receipt only. Each SuperNode's ``--node-config`` gives its
``partition-id`` and ``num-partitions``.
"""

from __future__ import annotations

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from cloaknet.flower import CloaknetMod, Transport, transport_from_context
from cloaknet_digits.task import DIMENSION, partition, to_record, to_vector, train


def make_transport(context: Context) -> Transport:
    """The transport this client submits through: the run config's, with any cloaknet key
    the SuperNode's node config sets (e.g. ``privacy``, ``epsilon``, ``chain``) taking
    precedence, so a node operator can pin the noise the client adds."""
    return transport_from_context(context, DIMENSION)


app = ClientApp(mods=[CloaknetMod(make_transport)])


@app.train()
def fit(msg: Message, context: Context) -> Message:
    """Train on this node's partition from the global model; reply with the local model."""
    config = context.run_config
    w = to_vector(msg.content.array_records["arrays"])
    x, y = partition(int(config["data-seed"]), int(context.node_config["partition-id"]),
                     int(context.node_config["num-partitions"]))
    local = train(w, x, y, steps=int(config["local-steps"]),
                  learning_rate=float(config["learning-rate"]))
    return Message(RecordDict({"arrays": to_record(local)}), reply_to=msg)
