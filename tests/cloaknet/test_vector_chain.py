"""Vector sums on a chain: the ``[protocol] name = "vector"`` table, the chain protocol's
wire format and analyzer result, and the client library's input checks for vectors."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nacl.signing import SigningKey

from cloaknet.analyzer_node import VECTOR_RESULT_COLUMNS, AnalyzerApp
from cloaknet.chain_init import free_ports
from cloaknet.chainfile import ChainFileError, CloakChain, chain_from_config, load_chain
from cloaknet.chainfile import write_chain_file as write_chain
from cloaknet.client import ChainClient, RoundResult, _parse_result
from cloaknet.errors import InputRangeError, ParameterError
from cloaknet.fl_accounting import plan_fl
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.randomness import DeterministicRandom
from cloaknet.validator import payload_validator
from cloaknet.vector_table import vector_plan_section, vector_section
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.chain_render import write_chain_config
from mixnet.core.actions import DeliveredBatch
from mixnet.errors import MalformedFrame

KEYS = [SigningKey(bytes([index + 1]) * 32).verify_key for index in range(2)]
#: Noiseless parameters for rounds of 4 users, d = 5, s = 64 (a power of two: sums of
#: multiples of 1/64 are exact floats).
PARAMS = VectorParams.noiseless(5, 1.0, 64.0, users=4)


def make_config(protocol: dict[str, Any] | None, *, users: int = 4, port: int = 9001,
                max_users: int | None = None) -> ChainConfig:
    """A two-mix chain on 127.0.0.1 (nothing listens at ``port``) with rounds of ``users``
    (to ``max_users``) users."""
    return ChainConfig(
        chain_id="vec",
        mixes=(NodeInfo("mix1", f"ws://127.0.0.1:{port}", KEYS[0]),
               NodeInfo("mix2", f"ws://127.0.0.1:{port + 1}", KEYS[1])),
        sink=NodeInfo("analyzer", f"ws://127.0.0.1:{port + 2}"),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=users, max_users=max_users or users,
                           deadline_seconds=30.0),
        sections={} if protocol is None else {"protocol": protocol},
    )


def load(table: dict[str, Any], **policy: Any) -> CloakChain:
    return chain_from_config(make_config(table, **policy), source="chain.toml")


def grid_vectors(users: int, params: VectorParams, seed: int) -> np.ndarray:
    """Vectors on the 1/s grid with norm at most C: rounding leaves them unchanged."""
    gen = np.random.default_rng(seed)
    steps = int(params.scale * params.clip / math.sqrt(params.dimension))
    ints = gen.integers(-steps, steps + 1, size=(users, params.dimension))
    return ints / params.scale


# --------------------------------------------------------------------------- chain file


def test_explicit_table_round_trips(tmp_path: Path) -> None:
    chain = load(vector_section(PARAMS))
    assert isinstance(chain.protocol, VectorChainProtocol)
    assert chain.protocol.params == PARAMS
    assert chain.messages == 5 * PARAMS.messages
    assert chain.payload_length == chain.protocol.vector.bytes_per_message
    assert math.isnan(chain.protocol.epsilon)
    path = tmp_path / "chain.toml"
    write_chain(path, make_config(None), vector_section(PARAMS))
    again = load_chain(path).protocol
    assert isinstance(again, VectorChainProtocol) and again.params == PARAMS


def test_explicit_table_defaults_users_to_the_round() -> None:
    table = vector_section(PARAMS)
    del table["min_users"], table["max_users"]
    protocol = load(table, users=3, max_users=4).protocol
    assert isinstance(protocol, VectorChainProtocol)
    assert protocol.params == dataclasses.replace(PARAMS, min_users=3, max_users=4)
    with pytest.raises(ChainFileError, match="protocol: window W"):
        load(table, users=3, max_users=5)  # the window serves 4 users


def test_plan_table_plans_like_plan_fl(tmp_path: Path) -> None:
    request = {"dimension": 20, "clip": 1.0, "rounds": 5, "epsilon": 3.0, "delta": 1e-5}
    chain = load({"name": "vector", "plan": request}, users=50)
    protocol = chain.protocol
    assert isinstance(protocol, VectorChainProtocol)
    made = plan_fl(20, 1.0, 5, 3.0, 1e-5, 50)
    assert protocol.params == made.params()
    assert protocol.epsilon == made.epsilon_achieved <= 3.0
    assert protocol.delta == made.delta_achieved <= 1e-5
    # the plan form written for a plan re-plans to the same parameters
    path = tmp_path / "chain.toml"
    write_chain(path, make_config(None, users=50), vector_plan_section(made))
    again = load_chain(path).protocol
    assert isinstance(again, VectorChainProtocol) and again.params == made.params()


BAD_TABLES: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({"dimension": None}, {}, "protocol.dimension: missing"),
    ({"dimension": "5"}, {}, "protocol.dimension: expected an integer, got string"),
    ({"clip": "1.0"}, {}, "protocol.clip: expected a number, got string"),
    ({"noise_variance": 0.5}, {}, "protocol.noise_variance: expected an exact fraction"),
    ({"modulus": "12x"}, {}, "protocol.modulus: expected a decimal string"),
    ({"window": 1.5}, {}, "protocol.window: expected a decimal string"),
    ({"colour": "red"}, {}, "protocol.colour: unknown key for protocol 'vector'"),
    ({"window": 3}, {}, "protocol: window W = 3 is below max_users"),
    ({"messages": 0}, {}, "protocol: messages must be"),
    ({}, {"users": 3, "max_users": 4}, "protocol.min_users: privacy is planned for 4 users"),
    ({}, {"users": 4, "max_users": 5},
     "protocol.max_users: parameters analyze rounds of at most 4"),
]


@pytest.mark.parametrize(("change", "policy", "message"), BAD_TABLES)
def test_explicit_table_errors_name_the_field(
    change: dict[str, Any], policy: dict[str, Any], message: str
) -> None:
    table = vector_section(PARAMS)
    for key, value in change.items():
        if value is None:
            del table[key]
        else:
            table[key] = value
    with pytest.raises(ChainFileError) as caught:
        load(table, **policy)
    assert str(caught.value).startswith("chain.toml: ")
    assert message in str(caught.value)


REQUEST = {"dimension": 20, "clip": 1.0, "rounds": 5, "epsilon": 3.0, "delta": 1e-5}

BAD_PLANS: list[tuple[dict[str, Any], str]] = [
    ({"name": "vector", "plan": "yes"}, "protocol.plan: expected a table"),
    ({"name": "vector", "plan": {**REQUEST, "epsilon": None}}, "protocol.plan.epsilon: missing"),
    ({"name": "vector", "plan": {**REQUEST, "rounds": 2.5}},
     "protocol.plan.rounds: expected an integer"),
    ({"name": "vector", "plan": {**REQUEST, "max_users": 60}}, "protocol.plan.max_users"),
    ({"name": "vector", "plan": {**REQUEST, "speed": 1}}, "protocol.plan.speed: unknown key"),
    ({"name": "vector", "plan": {**REQUEST, "users": 60}},
     "protocol.plan.users: privacy is planned for 60 users"),
    ({"name": "vector", "plan": {**REQUEST, "colluders": 49}},
     "protocol.plan: the split-and-mix bound needs at least 3 honest users"),
    ({"name": "vector", "plan": {**REQUEST, "neighbouring": "swap"}},
     "protocol.plan: neighbouring must be one of"),
    ({"name": "vector", "plan": REQUEST, "messages": 3},
     "protocol.messages: not allowed together with protocol.plan"),
    ({"name": "vectors", "users": 50, "epsilon": 1.0, "delta": 1e-6},
     "'vector' for vector sums"),
]


@pytest.mark.parametrize(("table", "message"), BAD_PLANS)
def test_plan_table_errors_name_the_field(table: dict[str, Any], message: str) -> None:
    table = {**table}
    if isinstance(table.get("plan"), dict):
        table["plan"] = {k: v for k, v in table["plan"].items() if v is not None}
    with pytest.raises(ChainFileError) as caught:
        load(table, users=50)
    assert message in str(caught.value)


def test_chain_file_on_disk_error_is_one_line(tmp_path: Path) -> None:
    table = vector_section(PARAMS)
    table["noise_variance"] = "1/0"
    path = tmp_path / "chain.toml"
    write_chain_config(path, make_config(table))
    with pytest.raises(ChainFileError) as caught:
        load_chain(path)
    assert str(caught.value) == f"{path}: protocol.noise_variance: zero denominator in '1/0'"


# --------------------------------------------------------------------------- wire format


def test_payloads_are_the_vector_protocols_messages() -> None:
    protocol = VectorChainProtocol.from_params(PARAMS)
    rng = DeterministicRandom("payloads")
    messages = protocol.encode_many(grid_vectors(4, PARAMS, 1), rng)
    payloads = protocol.payloads(messages)
    assert payloads == [protocol.vector.message_to_bytes(int(m)) for m in messages.reshape(-1)]
    assert all(len(p) == protocol.bytes_per_message for p in payloads)
    assert protocol.message_modulus == 256**protocol.bytes_per_message
    with pytest.raises(ParameterError):
        protocol.payloads(np.array([-1]))
    with pytest.raises(ParameterError):
        protocol.payloads(np.array([0.5]))


def test_validator_checks_width_index_and_share() -> None:
    protocol = VectorChainProtocol.from_params(PARAMS)
    valid = payload_validator(protocol)
    vector = protocol.vector
    share_bytes, index_bytes = vector.share_bytes, vector.index_bytes
    good = (4).to_bytes(index_bytes, "big") + (PARAMS.modulus - 1).to_bytes(share_bytes, "big")
    assert valid(good)
    assert not valid(good + b"\0")
    assert not valid(good[1:])
    bad_index = (5).to_bytes(index_bytes, "big") + (0).to_bytes(share_bytes, "big")
    assert not valid(bad_index)
    bad_share = (0).to_bytes(index_bytes, "big") + PARAMS.modulus.to_bytes(share_bytes, "big")
    assert not valid(bad_share)


# --------------------------------------------------------------------------- analyzer


def analyzed(protocol: VectorChainProtocol, vectors: np.ndarray, **change: Any) -> dict[str, Any]:
    rng = DeterministicRandom("analyzer")
    payloads = [p for row in vectors for p in protocol.encode_payloads(row, rng)]
    order = np.random.default_rng(3).permutation(len(payloads))
    shuffled = [payloads[i] for i in order]
    for index, payload in change.items():
        shuffled[int(index.removeprefix("at"))] = payload
    batch = DeliveredBatch(clients=len(vectors), count=len(shuffled), payloads=shuffled)
    return AnalyzerApp(protocol).analyze(7, batch)


def test_analyzer_publishes_the_exact_vector_sum_without_noise() -> None:
    protocol = VectorChainProtocol.from_params(PARAMS)
    vectors = grid_vectors(4, PARAMS, 2)
    result = analyzed(protocol, vectors)
    assert result["status"] == "ok" and result["dimension"] == 5
    assert result["vector"] == list(vectors.sum(axis=0))
    assert result["estimate"] == float(np.sum(vectors))
    assert result["epsilon"] is None and result["delta"] is None
    assert "training_rounds" not in result
    json.dumps(result, allow_nan=False)
    assert AnalyzerApp(protocol).result_columns() == VECTOR_RESULT_COLUMNS


def test_analyzer_states_the_plans_guarantee() -> None:
    made = plan_fl(6, 1.0, 4, 3.0, 1e-5, 5)
    protocol = VectorChainProtocol(VectorSumProtocol(made.params(), plan=made))
    result = analyzed(protocol, np.full((5, 6), 0.1))
    assert result["status"] == "ok"
    assert result["epsilon"] == made.epsilon_achieved and result["delta"] == made.delta_achieved
    assert result["training_rounds"] == 4 and len(result["vector"]) == 6
    json.dumps(result, allow_nan=False)


def test_a_share_out_of_range_is_an_error_result_not_a_sum() -> None:
    protocol = VectorChainProtocol.from_params(PARAMS)
    vector = protocol.vector
    bad = (0).to_bytes(vector.index_bytes, "big") + PARAMS.modulus.to_bytes(
        vector.share_bytes, "big"
    )
    result = analyzed(protocol, grid_vectors(4, PARAMS, 4), at0=bad)
    assert result["status"] == "error" and "vector" not in result


# --------------------------------------------------------------------------- client


@pytest.fixture
def vector_client() -> ChainClient:
    """A client of a vector chain nobody serves: any request would fail to connect, so an
    InputRangeError shows the value was refused before anything was sent."""
    chain = load(vector_section(PARAMS), port=_closed_port())
    return ChainClient(chain, retry_for=0.0)


def _closed_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago (nothing listens there)."""
    return free_ports("127.0.0.1", 1)[0]


BAD_VECTORS: list[tuple[object, str]] = [
    ([0.1] * 4, "expected a vector of dimension 5, got length 4"),
    (np.zeros(6), "expected a vector of dimension 5, got length 6"),
    ([0.1, 0.2, math.nan, 0.0, 0.0], "coordinate 2 is not finite"),
    (np.array([0.0, math.inf, 0.0, 0.0, 0.0]), "coordinate 1 is not finite"),
    ([0.1, "0.2", 0.0, 0.0, 0.0], "coordinate 1 must be a real number, got str"),
    ([True, 0.0, 0.0, 0.0, 0.0], "coordinate 0 must be a real number, got bool"),
    (np.zeros((1, 5)), "a vector must be 1-D"),
    (np.zeros(5, dtype=complex), "a vector must have a real dtype"),
    (np.zeros(5, dtype=bool), "a vector must have a real dtype"),
    (0.5, "this chain sums vectors of dimension 5"),
    ("01234", "this chain sums vectors of dimension 5"),
    ([10**400, 0, 0, 0, 0], "a vector must hold real numbers"),
]


@pytest.mark.parametrize(("value", "message"), BAD_VECTORS)
async def test_submit_refuses_a_bad_vector_before_sending(
    vector_client: ChainClient, value: object, message: str
) -> None:
    async with vector_client:
        with pytest.raises(InputRangeError, match=message.replace("(", r"\(")):
            await vector_client.submit(value)  # type: ignore[arg-type]


async def test_submit_many_is_all_or_nothing(vector_client: ChainClient) -> None:
    good: list[Any] = [
        np.zeros(5), [0.1, 0.0, 0.0, 0.0, Fraction(1, 2)], np.arange(5, dtype=np.int32)
    ]
    async with vector_client:
        with pytest.raises(InputRangeError, match="vector 3: coordinate 0 is not finite"):
            await vector_client.submit_many([*good, [math.nan] * 5])
        with pytest.raises(InputRangeError, match="vector 0: expected a vector of dimension 5"):
            await vector_client.submit_many(np.zeros((2, 4)))
        with pytest.raises(InputRangeError, match="expected a sequence of vectors"):
            await vector_client.submit_many(iter(good))  # type: ignore[arg-type]
    assert vector_client.vector is not None
    checked = vector_client.vector.check_vector(good[1])
    assert checked.dtype == np.float64 and checked.tolist() == [0.1, 0.0, 0.0, 0.0, 0.5]


async def test_scalar_chain_refuses_a_vector() -> None:
    from cloaknet.params import CloakParams
    from cloaknet.protocol_table import protocol_section

    params = CloakParams(modulus=1009, precision=10, messages=4, max_users=4)
    chain = load(protocol_section(params), port=_closed_port())
    async with ChainClient(chain, retry_for=0.0) as client:
        assert client.vector is None
        with pytest.raises(InputRangeError, match="input must be a real number"):
            await client.submit([0.1, 0.2])


def test_round_result_vector_parsing() -> None:
    reply: dict[str, object] = {"type": "result", "round": 3, "status": "ok", "users": 4,
                                "estimate": 0.5, "vector": [0.25, 0.25], "dimension": 2}
    parsed = _parse_result(3, reply, 2)
    assert parsed.vector == (0.25, 0.25) and parsed.estimate == 0.5
    assert _parse_result(3, reply).vector is None  # a scalar chain ignores it
    assert RoundResult(1, 2, 0.5, {}).vector is None
    for broken in ([0.25], [0.25, "x"], [0.25, True], "0.25", None):
        with pytest.raises(MalformedFrame):
            _parse_result(3, {**reply, "vector": broken}, 2)
