"""cloaknet.flower in one process: records, transports, the ledger, the mod and the strategy.

The strategy and the mod talk through :class:`_LoopbackGrid`, a test Grid that hands each
instruction to a ClientApp in this process (Flower's runtimes are exercised by
``tests/integration/test_flower.py``).
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr", reason="the Flower extra is not installed: pip install '.[flower]'")

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
    UserConfigValue,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from cloaknet.errors import ParameterError
from cloaknet.flower import (
    ArrayLayout,
    CloaknetFedAvg,
    CloaknetMod,
    PrivacyBudgetExhausted,
    PrivacyLedger,
    Receipt,
    RoundAborted,
    RoundMismatch,
    ShufflerTransport,
    Transport,
    protocol_digest,
    protocol_from_run_config,
    transport_from_context,
    transport_from_run_config,
)
from cloaknet.flower.records import KEY_PROTOCOL, KEY_ROUND, RECEIPT_RECORD
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.protocols.vector_rounding import clip_vectors
from cloaknet.randomness import DeterministicRandom


def _noiseless(dimension: int, users: int, clip: float = 1.0) -> VectorSumProtocol:
    return VectorSumProtocol(VectorParams.noiseless(dimension, clip, 4096.0, users=users))


def _record(values: NDArray[np.float64]) -> ArrayRecord:
    """A two-array model: ``a`` (2 × 2, float32) and ``b`` (the rest, float64)."""
    flat = np.asarray(values, dtype=np.float64)
    return ArrayRecord({"a": Array(flat[:4].reshape(2, 2).astype(np.float32)),
                        "b": Array(flat[4:].copy())})


# --------------------------------------------------------------------------- records


def test_layout_round_trip_keeps_keys_shapes_and_dtypes() -> None:
    record = _record(np.arange(7, dtype=np.float64))
    layout = ArrayLayout.of(record)
    assert layout.keys == ("a", "b") and layout.shapes == ((2, 2), (3,)) and layout.size == 7
    back = layout.unflatten(layout.flatten(record) + 1.0)
    assert back["a"].numpy().dtype == np.float32
    assert np.array_equal(layout.flatten(back), np.arange(7) + 1.0)


def test_layout_refuses_integer_arrays_and_other_layouts() -> None:
    with pytest.raises(ParameterError, match="floating-point"):
        ArrayLayout.of(ArrayRecord({"n": Array(np.arange(3))}))
    layout = ArrayLayout.of(_record(np.zeros(7)))
    with pytest.raises(ParameterError, match="layout"):
        layout.flatten(ArrayRecord({"a": Array(np.zeros(7))}))
    with pytest.raises(ParameterError):
        layout.unflatten(np.zeros(6))


def test_receipt_record_round_trip() -> None:
    receipt = Receipt("abc-r1", "00ff", "shuffler")
    assert Receipt.from_record(receipt.to_record()) == receipt
    with pytest.raises(ParameterError):
        Receipt.from_record(ConfigRecord({"round": "x"}))


# --------------------------------------------------------------------------- transports


@pytest.mark.parametrize("spool", [False, True])
def test_shuffler_sums_clipped_updates(tmp_path: Path, spool: bool) -> None:
    users, d = 5, 7
    protocol = _noiseless(d, users)
    transport = ShufflerTransport(protocol, tmp_path / "spool" if spool else None,
                                  rng=DeterministicRandom("flower-shuffler"))
    updates = np.random.default_rng(3).normal(0.0, 0.8, (users, d))
    receipts = [transport.submit("run-r1", u) for u in updates]
    result = transport.aggregate("run-r1", receipts)
    assert result.users == users
    expected = clip_vectors(updates, 1.0).sum(axis=0)
    assert np.max(np.abs(result.total - expected)) <= users / protocol.params.scale
    again = transport.aggregate("run-r1", receipts)
    assert np.array_equal(again.total, result.total)
    if spool:
        folder = tmp_path / "spool" / "run-r1"
        assert [p.name for p in folder.iterdir()] == ["result.json"]  # inputs erased
        assert folder.stat().st_mode & 0o077 == 0 and folder.parent.stat().st_mode & 0o077 == 0
    with pytest.raises(RoundAborted):
        transport.submit("run-r1", updates[0])


def test_shuffler_releases_nothing_below_min_users(tmp_path: Path) -> None:
    transport = ShufflerTransport(_noiseless(3, users=4), tmp_path)
    receipts = [transport.submit("r", np.ones(3)) for _ in range(3)]
    with pytest.raises(RoundAborted, match="nothing released"):
        transport.aggregate("r", receipts)
    with pytest.raises(RoundAborted):
        transport.aggregate("r", receipts)
    assert not list((tmp_path / "r").glob("*.npy"))


def test_shuffler_checks_receipts() -> None:
    transport = ShufflerTransport(_noiseless(3, users=2))
    receipts = [transport.submit("r", np.ones(3)) for _ in range(2)]
    with pytest.raises(RoundMismatch):
        transport.aggregate("r", [*receipts, Receipt("r", "beef", "shuffler")])
    with pytest.raises(RoundMismatch):
        transport.aggregate("r", [Receipt("other", "beef", "shuffler")])
    with pytest.raises(ParameterError):
        transport.submit("../escape", np.ones(3))


def test_run_config_builds_matching_protocols() -> None:
    config: dict[str, UserConfigValue] = {"clients": 20, "num-server-rounds": 4,
                                          "privacy": "dp", "epsilon": 4.0}
    a = protocol_from_run_config(config, 6)
    b = transport_from_run_config(config, 6).protocol
    assert protocol_digest(a) == protocol_digest(b)
    assert a.plan is not None and a.plan.rounds == 4 and a.plan.meets_target
    none = protocol_from_run_config({"privacy": "none", "clients": 3}, 6)
    assert none.plan is None and none.params.noise_variance == 0
    assert protocol_digest(none) != protocol_digest(a)
    with pytest.raises(ParameterError):
        protocol_from_run_config({"privacy": "maybe"}, 6)
    with pytest.raises(ParameterError):
        transport_from_run_config({"transport": "chain"}, 6)


def test_node_config_pins_the_clients_protocol() -> None:
    run_config: dict[str, UserConfigValue] = {"clients": 20, "privacy": "none"}
    context = Context(run_id=1, node_id=1, node_config={"privacy": "dp", "partition-id": 0},
                      state=RecordDict(), run_config=run_config)
    pinned = transport_from_context(context, 6).protocol
    assert pinned.plan is not None  # the node's "dp" wins over the run's "none"
    assert protocol_digest(pinned) != protocol_digest(protocol_from_run_config(run_config, 6))


# --------------------------------------------------------------------------- ledger


def test_ledger_matches_the_plan_and_refuses_extra_rounds() -> None:
    protocol = protocol_from_run_config(
        {"clients": 30, "num-server-rounds": 3, "epsilon": 2.0, "delta": 1e-6}, 5)
    plan = protocol.plan
    assert plan is not None
    ledger = PrivacyLedger(plan)
    spent = [ledger.charge() for _ in range(3)]
    assert [s.rounds for s in spent] == [1, 2, 3]
    assert spent[0].epsilon < spent[1].epsilon < spent[2].epsilon
    assert spent[2].epsilon == pytest.approx(plan.epsilon_achieved, rel=1e-12)
    assert spent[2].epsilon <= plan.epsilon and spent[2].delta <= plan.delta_achieved
    with pytest.raises(PrivacyBudgetExhausted):
        ledger.charge()
    assert ledger.rounds == 3
    noiseless = PrivacyLedger(None)
    assert math.isinf(noiseless.charge().epsilon)


# --------------------------------------------------------------------------- mod + strategy


class _LoopbackGrid(Grid):
    """A Grid whose nodes are ClientApps in this process (one Context each)."""

    def __init__(self, apps: dict[int, ClientApp]) -> None:
        self.apps = apps
        self.contexts = {
            node: Context(run_id=1, node_id=node, node_config={"partition-id": i},
                          state=RecordDict(), run_config={})
            for i, node in enumerate(apps)
        }
        self._replies: dict[str, Message] = {}

    def set_run(self, run: Run) -> None:  # pragma: no cover - not used by the strategy
        raise NotImplementedError

    @property
    def run(self) -> Run:  # pragma: no cover - not used by the strategy
        raise NotImplementedError

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.apps)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            node = msg.metadata.dst_node_id
            self._replies[msg.metadata.message_id] = self.apps[node](msg, self.contexts[node])
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Flower's messages read the run and node id of the process; set them for the test."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def _client(transport: Transport, target: NDArray[np.float64], *,
            mod: bool = True, forward_metrics: bool = False) -> ClientApp:
    """A ClientApp whose training moves the model by ``target`` and reports a loss."""
    app = ClientApp(mods=[CloaknetMod(transport, forward_metrics=forward_metrics)]
                    if mod else [])

    @app.train()
    def fit(msg: Message, context: Context) -> Message:
        record = msg.content.array_records["arrays"]
        layout = ArrayLayout.of(record)
        local = layout.unflatten(layout.flatten(record) + target)
        return Message(RecordDict({"arrays": local,
                                   "metrics": MetricRecord({"loss": 0.5, "num-examples": 9})}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"accuracy": 1.0})}), reply_to=msg)

    return app


def _instruction(content: RecordDict, kind: str = MessageType.TRAIN) -> Message:
    msg = Message(content, 7, kind)
    msg.metadata.__dict__["_message_id"] = "m1"
    return msg


def _context() -> Context:
    return Context(run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config={})


@pytest.mark.usefixtures("task_identity")
def test_mod_replies_with_a_receipt_only() -> None:
    transport = ShufflerTransport(_noiseless(7, users=1))
    app = _client(transport, np.full(7, 0.1))
    config = ConfigRecord({KEY_ROUND: "t-r1", KEY_PROTOCOL: protocol_digest(transport.protocol)})
    reply = app(_instruction(RecordDict({"arrays": _record(np.zeros(7)), "config": config})),
                _context())
    assert not reply.has_error()
    assert len(reply.content.array_records) == 0 and len(reply.content.metric_records) == 0
    receipt = Receipt.from_record(reply.content.config_records[RECEIPT_RECORD])
    total = transport.aggregate("t-r1", [receipt]).total
    assert np.max(np.abs(total - 0.1)) <= 1 / transport.protocol.params.scale + 1e-7
    # other message types pass through untouched
    other = app(_instruction(RecordDict({"config": ConfigRecord()}), MessageType.EVALUATE),
                _context())
    assert other.content.metric_records["metrics"]["accuracy"] == 1.0


@pytest.mark.usefixtures("task_identity")
def test_mod_forwards_metrics_only_when_asked() -> None:
    transport = ShufflerTransport(_noiseless(7, users=1))
    app = _client(transport, np.zeros(7), forward_metrics=True)
    config = ConfigRecord({KEY_ROUND: "t-r1", KEY_PROTOCOL: protocol_digest(transport.protocol)})
    reply = app(_instruction(RecordDict({"arrays": _record(np.zeros(7)), "config": config})),
                _context())
    assert reply.content.metric_records["metrics"]["loss"] == 0.5
    assert len(reply.content.array_records) == 0


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("problem", ["no-round", "other-protocol", "wrong-size"])
def test_mod_refuses_and_submits_nothing(problem: str) -> None:
    transport = ShufflerTransport(_noiseless(7, users=1))
    app = _client(transport, np.zeros(7))
    config = ConfigRecord({KEY_ROUND: "t-r1", KEY_PROTOCOL: protocol_digest(transport.protocol)})
    model = np.zeros(7)
    if problem == "no-round":
        config = ConfigRecord({"server-round": 1})
    elif problem == "other-protocol":
        config[KEY_PROTOCOL] = protocol_digest(_noiseless(7, users=2))
    else:
        model = np.zeros(8)
    reply = app(_instruction(RecordDict({"arrays": _record(model), "config": config})),
                _context())
    assert reply.has_error()
    with pytest.raises(RoundAborted):  # nothing was pooled
        transport.aggregate("t-r1", [])


def _fedavg(transport: ShufflerTransport, targets: NDArray[np.float64], *, rounds: int,
            plain: int = 0, lr: float = 1.0) -> tuple[CloaknetFedAvg, list[ArrayRecord]]:
    """Run ``rounds`` rounds of CloaknetFedAvg over loopback clients (the last ``plain`` of
    them without the mod); returns the strategy and the global model after each round."""
    apps = {100 + i: _client(transport, t, mod=i < len(targets) - plain)
            for i, t in enumerate(targets)}
    strategy = CloaknetFedAvg(transport, server_learning_rate=lr)
    models: list[ArrayRecord] = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        models.append(arrays)
        return MetricRecord({"round": server_round})

    strategy.start(_LoopbackGrid(apps), _record(np.zeros(targets.shape[1])),
                   num_rounds=rounds, evaluate_fn=evaluate)
    return strategy, models


@pytest.mark.usefixtures("task_identity")
def test_strategy_moves_the_model_by_the_mean_of_clipped_updates() -> None:
    users, d = 4, 7
    targets = np.random.default_rng(5).normal(0.0, 0.7, (users, d))
    transport = ShufflerTransport(_noiseless(d, users))
    strategy, models = _fedavg(transport, targets, rounds=2, lr=2.0)
    mean = clip_vectors(targets, 1.0).mean(axis=0)
    layout = ArrayLayout.of(models[0])
    for r, record in enumerate(strategy.records, start=1):
        assert (record.replies, record.users, record.arrays_received) == (users, users, 0)
        assert record.total is not None and record.step is not None
        assert np.max(np.abs(record.total / users - mean)) <= 1 / transport.protocol.params.scale
        assert np.array_equal(record.step, 2.0 * record.total / users)
        moved = layout.flatten(models[r]) - layout.flatten(models[r - 1])
        assert np.allclose(moved, record.step, atol=1e-6)  # float32 array "a"


@pytest.mark.usefixtures("task_identity")
def test_strategy_ignores_clients_that_send_arrays() -> None:
    users, d = 3, 7
    targets = np.ones((users + 1, d)) * 0.1
    transport = ShufflerTransport(_noiseless(d, users))
    strategy, _ = _fedavg(transport, targets, rounds=1, plain=1)
    record = strategy.records[0]
    assert (record.arrays_received, record.replies, record.users) == (1, users, users)


@pytest.mark.usefixtures("task_identity")
def test_strategy_leaves_the_model_when_the_round_aborts() -> None:
    d = 7
    transport = ShufflerTransport(_noiseless(d, users=3))
    targets = np.ones((3, d)) * 0.1
    apps = {1: _client(transport, targets[0]), 2: _client(transport, targets[1], mod=False),
            3: _client(transport, targets[2], mod=False)}
    strategy = CloaknetFedAvg(transport)
    models: list[ArrayRecord] = []

    def keep(server_round: int, arrays: ArrayRecord) -> None:
        models.append(arrays)

    strategy.start(_LoopbackGrid(apps), _record(np.zeros(d)), num_rounds=1, evaluate_fn=keep)
    assert strategy.records[0].aborted is not None
    assert np.array_equal(ArrayLayout.of(models[0]).flatten(models[1]), np.zeros(d))


@pytest.mark.usefixtures("task_identity")
def test_strategy_with_noise_accounts_every_round() -> None:
    users, d, rounds = 30, 5, 3
    config: dict[str, UserConfigValue] = {"clients": users, "num-server-rounds": rounds,
                                          "epsilon": 4.0, "clip": 1.0}
    transport = ShufflerTransport(protocol_from_run_config(config, d))
    plan = transport.protocol.plan
    assert plan is not None
    targets = np.random.default_rng(8).normal(0.0, 0.2, (users, d))
    strategy, _ = _fedavg(transport, targets, rounds=rounds)
    mean = clip_vectors(targets, 1.0).mean(axis=0)
    spent = [r.spent for r in strategy.records]
    assert [s.rounds for s in spent if s is not None] == [1, 2, 3]
    final = spent[-1]
    assert final is not None and final.epsilon == pytest.approx(plan.epsilon_achieved)
    for record in strategy.records:
        assert record.total is not None
        error = np.abs(record.total / users - mean)
        assert np.all(error <= 6 * plan.predicted_rmse_mean + 1e-9)
    with pytest.raises(PrivacyBudgetExhausted):
        strategy.configure_train(rounds + 1, _record(np.zeros(d)), ConfigRecord(),
                                 _LoopbackGrid({}))


def test_strategy_checks_its_arguments() -> None:
    transport = ShufflerTransport(_noiseless(7, users=3))
    with pytest.raises(ParameterError):
        CloaknetFedAvg(transport, min_train_nodes=2)
    with pytest.raises(ParameterError):
        CloaknetFedAvg(transport, server_learning_rate=0.0)
    bad: Callable[..., object] = CloaknetFedAvg
    with pytest.raises(TypeError):
        bad(object())


# --------------------------------------------------------------------------- the chain


@pytest.mark.usefixtures("task_identity")
async def test_strategy_over_a_local_chain(tmp_path: Path) -> None:
    """Mod and strategy with :class:`ChainTransport`: three mixes and the analyzer on
    127.0.0.1 in this event loop; Flower's synchronous calls run in a worker thread."""
    from cloaknet.flower.chain import ChainTransport
    from cloaknet.localchain import local_chain
    from cloaknet.protocols.vector_chain import VectorChainProtocol
    from mixnet.chain import RoundPolicy

    users, d = 4, 7
    chain_protocol = VectorChainProtocol(_noiseless(d, users))
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    targets = np.random.default_rng(11).normal(0.0, 0.7, (users, d))
    async with local_chain(tmp_path, chain_protocol, policy, mixes=3) as chain:
        transport = ChainTransport(chain.chain)
        assert protocol_digest(transport.protocol) == protocol_digest(chain_protocol.vector)
        apps = {200 + i: _client(transport, t) for i, t in enumerate(targets)}
        strategy = CloaknetFedAvg(transport, round_timeout=60.0)
        await asyncio.to_thread(strategy.start, _LoopbackGrid(apps), _record(np.zeros(d)),
                                num_rounds=2)
    mean = clip_vectors(targets, 1.0).mean(axis=0)
    rounds = [r.receipts[0].round for r in strategy.records]
    assert len(set(rounds)) == 2  # one chain round per Flower round
    for record in strategy.records:
        assert (record.replies, record.users, record.arrays_received) == (users, users, 0)
        assert {r.round for r in record.receipts} == {record.receipts[0].round}
        assert record.total is not None
        assert np.max(np.abs(record.total / users - mean)) <= 1 / 4096.0


def test_local_federation_formats_node_config() -> None:
    from cloaknet.flower.local import _node_config, _parse_assignment

    assert _node_config({"partition-id": 0, "chain": "/a/b.toml", "x": 1.5, "on": True}) == (
        'partition-id=0 chain="/a/b.toml" x=1.5 on=true')
    with pytest.raises(ValueError, match="whitespace"):
        _node_config({"chain": "/a b/c.toml"})
    assert _parse_assignment('spool="/tmp/x y"') == ("spool", "/tmp/x y")
    assert _parse_assignment("num-server-rounds=2") == ("num-server-rounds", 2)
