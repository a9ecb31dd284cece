"""The client side: a Flower mod that sends the model update through cloaknet instead of
returning the trained parameters to the server.

Use it like Flower's own ``LocalDpMod``::

    app = ClientApp(mods=[CloaknetMod(make_transport)])

For a ``train`` instruction from :class:`~cloaknet.flower.strategy.CloaknetFedAvg` the mod

1. checks the instruction: exactly one ``ArrayRecord`` (the global model w), a round tag
   (:data:`~cloaknet.flower.records.KEY_ROUND`) and the server's protocol digest
   (:data:`~cloaknet.flower.records.KEY_PROTOCOL`), which must equal this client's own
   (:func:`~cloaknet.flower.records.protocol_digest` of ``transport.protocol``): the client
   never lets the server choose its clipping or noise;
2. calls the rest of the ClientApp, which trains and replies with one ``ArrayRecord`` (the
   local model w′) of the same layout;
3. submits Δ = w′ − w through the transport, which clips it to L2 norm C, rounds it, adds the
   protocol's noise and splits it into shares (:meth:`Transport.submit`);
4. replies with the receipt only (:data:`~cloaknet.flower.records.RECEIPT_RECORD`): no
   arrays, and none of the ClientApp's metrics unless ``forward_metrics`` is set.

Any violation is answered with a Flower error reply (``MOD_FAILED_PRECONDITION``) naming it,
and nothing is submitted. Other message types pass through unchanged. The transport is a
:class:`~cloaknet.flower.transport.Transport` or a function of the ClientApp's ``Context``
returning one (called for each train instruction: under Flower's deployment runtime every
message runs in a fresh ``flwr-clientapp`` process, so nothing is kept between rounds).
"""

from __future__ import annotations

from collections.abc import Callable
from logging import ERROR, INFO

from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import log
from flwr.common.constant import ErrorCode

from cloaknet.errors import CloakError
from cloaknet.flower.records import (
    KEY_PROTOCOL,
    KEY_ROUND,
    RECEIPT_RECORD,
    ArrayLayout,
    check_round_tag,
    protocol_digest,
)
from cloaknet.flower.transport import Transport

__all__ = ["CloaknetMod", "TransportSource"]

#: A transport, or a function of the ClientApp's context that returns one.
TransportSource = Transport | Callable[[Context], Transport]


def _fail(msg: Message, reason: str) -> Message:
    log(ERROR, "CloaknetMod: %s", reason)
    return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)


def _one(records: dict[str, ArrayRecord]) -> ArrayRecord | None:
    return next(iter(records.values())) if len(records) == 1 else None


class CloaknetMod:
    """Client-side mod (module doc). ``transport``: a transport or a function of the
    ``Context`` returning one; ``forward_metrics``: also send the ClientApp's MetricRecords
    to the server (off by default: metrics such as a client's loss or example count are
    about that one client and travel in the clear)."""

    def __init__(self, transport: TransportSource, *, forward_metrics: bool = False) -> None:
        if not isinstance(transport, Transport) and not callable(transport):
            raise TypeError("transport must be a Transport or a function returning one")
        self._transport = transport
        self.forward_metrics = bool(forward_metrics)

    def _resolve(self, context: Context) -> Transport:
        source = self._transport
        made = source if isinstance(source, Transport) else source(context)
        if not isinstance(made, Transport):
            raise TypeError(f"the transport function returned {type(made).__name__}")
        return made

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        """Run the ClientApp and send its update through cloaknet (module doc)."""
        category = msg.metadata.message_type.split(".", 1)[0]
        if category != MessageType.TRAIN:
            return call_next(msg, ctxt)
        content = msg.content
        configs = list(content.config_records.values())
        config = configs[0] if len(configs) == 1 else ConfigRecord()
        if KEY_ROUND not in config or KEY_PROTOCOL not in config:
            return _fail(msg, "the train instruction has no cloaknet round: the server must "
                              "run CloaknetFedAvg (one ConfigRecord with "
                              f"{KEY_ROUND!r} and {KEY_PROTOCOL!r})")
        global_record = _one(dict(content.array_records))
        if global_record is None:
            return _fail(msg, "the train instruction must hold exactly one ArrayRecord")
        try:
            tag = check_round_tag(config[KEY_ROUND])
            transport = self._resolve(ctxt)
            mine = protocol_digest(transport.protocol)
            if config[KEY_PROTOCOL] != mine:
                return _fail(msg, f"the server plans with protocol {config[KEY_PROTOCOL]!r}, "
                                  f"this client with {mine!r}: refusing to submit")
            layout = ArrayLayout.of(global_record)
            if layout.size != transport.protocol.dimension:
                return _fail(msg, f"the model has {layout.size} parameters, the protocol "
                                  f"sums vectors of dimension {transport.protocol.dimension}")
            before = layout.flatten(global_record)
        except CloakError as exc:
            return _fail(msg, str(exc))

        out = call_next(msg, ctxt)
        if out.has_error():
            return out
        local_record = _one(dict(out.content.array_records))
        if local_record is None:
            return _fail(msg, "the ClientApp's train reply must hold exactly one ArrayRecord")
        try:
            update = layout.flatten(local_record) - before
            receipt = transport.submit(tag, update)
        except CloakError as exc:
            return _fail(msg, f"{type(exc).__name__}: {exc}")
        log(INFO, "CloaknetMod: update submitted to %s round %s", receipt.transport,
            receipt.round)
        reply = RecordDict({RECEIPT_RECORD: receipt.to_record()})
        if self.forward_metrics:
            for key, record in out.content.metric_records.items():
                reply[key] = record
        return Message(reply, reply_to=msg)
