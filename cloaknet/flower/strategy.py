"""The server side: a Flower strategy that reads the round's aggregate from cloaknet's analyzer.

:class:`CloaknetFedAvg` is Flower's message-API ``FedAvg`` (``flwr.serverapp.strategy``) with
the aggregation replaced. Each training round it

1. charges the round to its :class:`~cloaknet.flower.ledger.PrivacyLedger` (refusing a round
   beyond the plan's T), and sends the sampled clients the global model w with a fresh round
   tag and the protocol's digest (:mod:`cloaknet.flower.records`);
2. collects the replies: each must be a receipt only — a reply carrying model arrays means the
   client does not run :class:`~cloaknet.flower.mod.CloaknetMod`; its arrays are never used,
   and the round is counted in :attr:`RoundRecord.arrays_received`;
3. asks the transport for the round's published result (:meth:`Transport.aggregate`): the
   analyzer's estimate S of Σ_i clip(Δ_i) over the round's n users;
4. sets w ← w + η·S/n (η = ``server_learning_rate``): the *unweighted* mean of the clipped
   updates, as in user-level DP-FedAvg — weighting by example counts would need each client's
   count, which is private too;
5. logs the privacy spent so far and returns a MetricRecord with ``cloaknet-users``,
   ``epsilon`` and ``delta`` (``epsilon`` = ∞ without noise is reported as −1).

If the transport reports the round aborted (too few users) the model is left unchanged. The
per-round :attr:`records` keep what the server saw (for logs and tests).

Federated *evaluation* is off by default (``fraction_evaluate=0``): Flower's evaluation
replies carry each client's metrics in the clear. Evaluate centrally (``evaluate_fn`` of
``start``) on public data instead, or turn it on knowing what it reveals.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from numpy.typing import NDArray

from cloaknet.errors import CloakError, ParameterError
from cloaknet.flower.ledger import PrivacyLedger, Spent
from cloaknet.flower.records import (
    KEY_PROTOCOL,
    KEY_ROUND,
    RECEIPT_RECORD,
    ArrayLayout,
    Receipt,
    protocol_digest,
)
from cloaknet.flower.transport import RoundAborted, Transport, TransportError

__all__ = ["CloaknetFedAvg", "RoundRecord"]


@dataclass
class RoundRecord:
    """What the server saw in one training round: ``server_round``, the ``round_tag`` it
    asked for, ``replies`` (receipts received), ``failures`` (error replies),
    ``arrays_received`` (replies that carried model arrays, which were ignored),
    ``aborted`` (the reason, if nothing was released), and for a released round the
    analyzer's ``users`` and ``total`` (Σ clip(Δ_i) estimate), the ``step`` applied to the
    model (η·total/users) and the privacy ``spent`` after it."""

    server_round: int
    round_tag: str
    replies: int = 0
    failures: int = 0
    arrays_received: int = 0
    aborted: str | None = None
    users: int = 0
    total: NDArray[np.float64] | None = None
    step: NDArray[np.float64] | None = None
    spent: Spent | None = None
    receipts: list[Receipt] = field(default_factory=list)


@dataclass
class _Pending:
    server_round: int
    tag: str
    layout: ArrayLayout
    weights: NDArray[np.float64]
    spent: Spent


class CloaknetFedAvg(FedAvg):
    """FedAvg whose aggregate comes from cloaknet's analyzer (module doc).

    ``transport``: the server half of a :class:`~cloaknet.flower.transport.Transport` (its
    ``protocol`` must be the one the clients use); ``server_learning_rate`` η > 0;
    ``round_timeout``: seconds to wait for a round's result. ``min_train_nodes`` and
    ``min_available_nodes`` default to the protocol's ``min_users`` (a round needs that many
    submissions to be released); the other arguments are ``FedAvg``'s.

    :raises TypeError: ``transport`` is not a Transport.
    :raises ParameterError: η or the timeout not positive and finite, or ``min_train_nodes``
        below the protocol's ``min_users``.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        server_learning_rate: float = 1.0,
        round_timeout: float = 600.0,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 0.0,
        min_train_nodes: int | None = None,
        min_evaluate_nodes: int = 0,
        min_available_nodes: int | None = None,
    ) -> None:
        if not isinstance(transport, Transport):
            raise TypeError(f"transport must be a Transport, not {type(transport).__name__}")
        for name, value in (("server_learning_rate", server_learning_rate),
                            ("round_timeout", round_timeout)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
        users = transport.protocol.min_round_users
        train_nodes = users if min_train_nodes is None else min_train_nodes
        if train_nodes < users:
            raise ParameterError(
                f"min_train_nodes = {train_nodes} is below the protocol's min_users = {users}"
            )
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=max(train_nodes, min_available_nodes or 0),
        )
        self.transport = transport
        self.server_learning_rate = float(server_learning_rate)
        self.round_timeout = float(round_timeout)
        self.ledger = PrivacyLedger(transport.protocol.plan)
        self.records: list[RoundRecord] = []
        self._digest = protocol_digest(transport.protocol)
        self._run_tag = secrets.token_hex(6)
        self._pending: _Pending | None = None

    def summary(self) -> None:
        """Log the strategy's configuration, the protocol and the planned guarantee."""
        protocol = self.transport.protocol
        plan = protocol.plan
        log(INFO, "\t├──> cloaknet: transport %s, %r", self.transport.name, protocol)
        log(INFO, "\t│\t├──clip C = %g, %d messages of %d bytes per client and round",
            protocol.params.clip, protocol.messages_per_user, protocol.bytes_per_message)
        if plan is None:
            log(INFO, "\t│\t└──no noise: no differential privacy")
        else:
            log(INFO, "\t│\t└──planned: (ε, δ) = (%.4f, %.3g) over %d rounds of >= %d users",
                plan.epsilon_achieved, plan.delta_achieved, plan.rounds, plan.users)
        log(INFO, "\t├──> server learning rate %g (unweighted mean of clipped updates)",
            self.server_learning_rate)
        super().summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's instructions, with the round tag and protocol digest added (module doc).

        :raises PrivacyBudgetExhausted: the plan's rounds are used up.
        :raises ParameterError: the model's size is not the protocol's dimension.
        """
        layout = ArrayLayout.of(arrays)
        if layout.size != self.transport.protocol.dimension:
            raise ParameterError(
                f"the model has {layout.size} parameters, the protocol sums vectors of "
                f"dimension {self.transport.protocol.dimension}"
            )
        weights = layout.flatten(arrays)
        spent = self.ledger.charge()
        tag = f"{self._run_tag}-r{server_round}"
        self._pending = _Pending(server_round, tag, layout, weights, spent)
        config[KEY_ROUND] = tag
        config[KEY_PROTOCOL] = self._digest
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The new global model from the analyzer's sum (module doc); ``(None, None)`` if
        nothing was released.

        :raises RuntimeError: called without a matching :meth:`configure_train`.
        """
        pending = self._pending
        if pending is None or pending.server_round != server_round:
            raise RuntimeError(f"aggregate_train({server_round}) without configure_train")
        self._pending = None
        record = RoundRecord(server_round, pending.tag)
        self.records.append(record)
        for reply in replies:
            if reply.has_error():
                record.failures += 1
                log(WARNING, "cloaknet: node %d failed: %s", reply.metadata.src_node_id,
                    reply.error.reason)
                continue
            content = reply.content
            if len(content.array_records):
                record.arrays_received += 1
                log(ERROR, "cloaknet: node %d sent model arrays to the server (no "
                    "CloaknetMod?): ignored", reply.metadata.src_node_id)
                continue
            try:
                receipt = Receipt.from_record(content.config_records[RECEIPT_RECORD])
            except (KeyError, CloakError) as exc:
                record.failures += 1
                log(WARNING, "cloaknet: node %d sent no valid receipt: %s",
                    reply.metadata.src_node_id, exc)
                continue
            record.receipts.append(receipt)
        record.replies = len(record.receipts)
        log(INFO, "cloaknet: %d receipts, %d failures", record.replies, record.failures)
        if not record.receipts:
            record.aborted = "no receipts"
            return None, None
        try:
            aggregate = self.transport.aggregate(pending.tag, record.receipts,
                                                 timeout=self.round_timeout)
        except (TransportError, TimeoutError) as exc:
            kind = "aborted" if isinstance(exc, RoundAborted) else "failed"
            record.aborted = f"{kind}: {exc}"
            log(WARNING, "cloaknet: round %s %s; the model is unchanged", pending.tag,
                record.aborted)
            return None, None
        total = np.asarray(aggregate.total, dtype=np.float64)
        if total.shape != pending.weights.shape or aggregate.users < 1:
            record.aborted = f"malformed aggregate: shape {total.shape}, {aggregate.users} users"
            log(ERROR, "cloaknet: round %s %s", pending.tag, record.aborted)
            return None, None
        if aggregate.users != record.replies:
            log(WARNING, "cloaknet: the analyzer summed %d users, %d replied",
                aggregate.users, record.replies)
        step = self.server_learning_rate * total / aggregate.users
        record.users, record.total, record.step = aggregate.users, total, step
        record.spent = pending.spent
        log(INFO, "cloaknet: round %s: sum of %d clipped updates, ‖mean‖₂ = %.4f",
            pending.tag, aggregate.users, float(np.linalg.norm(total)) / aggregate.users)
        log(INFO, "cloaknet: %s", pending.spent.describe())
        eps = pending.spent.epsilon
        metrics = MetricRecord({
            "cloaknet-users": aggregate.users,
            "epsilon": -1.0 if math.isinf(eps) else eps,
            "delta": pending.spent.delta,
        })
        return pending.layout.unflatten(pending.weights + step), metrics
