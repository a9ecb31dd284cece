"""cloaknet for Flower (``pip install 'cloaknet[flower]'``; written for Flower 1.42's Message API).

What a Flower user plugs in:

* client side, :class:`CloaknetMod` — a ClientApp mod that takes the model update the
  ClientApp produced, sends it through a cloaknet :class:`Transport` (clipped, rounded,
  noised, split into shares, shuffled) and replies to the server with a receipt instead of
  the parameters;
* server side, :class:`CloaknetFedAvg` — a ``flwr.serverapp.strategy`` strategy that reads the
  round's sum of clipped updates from the analyzer, moves the global model by the mean, and
  keeps the privacy ledger over the rounds (:class:`PrivacyLedger`);
* transports: :class:`ShufflerTransport` (the exact ideal shuffler; in memory or through a
  spool directory on one machine) and :class:`~cloaknet.flower.chain.ChainTransport` (the
  cascade mixnet and the analyzer node);
* :func:`transport_from_run_config` / :func:`transport_from_context`: both sides from a
  Flower run config (a SuperNode's node config may pin the client's choices);
* :class:`~cloaknet.flower.local.LocalFederation`: Flower's deployment runtime on 127.0.0.1
  (no Ray) for examples and tests.

``import cloaknet`` never imports this package (nor Flower). See ``docs/flower.md`` and
``examples/flower/``.
"""

from cloaknet.flower.config import (
    protocol_from_run_config,
    transport_from_context,
    transport_from_run_config,
)
from cloaknet.flower.ledger import PrivacyBudgetExhausted, PrivacyLedger, Spent
from cloaknet.flower.mod import CloaknetMod
from cloaknet.flower.records import ArrayLayout, Receipt, protocol_digest
from cloaknet.flower.strategy import CloaknetFedAvg, RoundRecord
from cloaknet.flower.transport import (
    Aggregate,
    RoundAborted,
    RoundMismatch,
    ShufflerTransport,
    Transport,
    TransportError,
)

__all__ = [
    "Aggregate",
    "ArrayLayout",
    "CloaknetFedAvg",
    "CloaknetMod",
    "PrivacyBudgetExhausted",
    "PrivacyLedger",
    "Receipt",
    "RoundAborted",
    "RoundMismatch",
    "RoundRecord",
    "ShufflerTransport",
    "Spent",
    "Transport",
    "TransportError",
    "protocol_digest",
    "protocol_from_run_config",
    "transport_from_context",
    "transport_from_run_config",
]
