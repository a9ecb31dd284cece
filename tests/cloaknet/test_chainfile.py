"""Tests for cloaknet.chainfile: the [protocol] table, writing chain files, node keys."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
import stat
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from cloaknet import accounting as acc
from cloaknet.chainfile import (
    ChainFileError,
    CloakChain,
    chain_from_config,
    generate_node_keys,
    load_chain,
    protocol_section,
    write_chain_file,
)
from cloaknet.errors import CloakError
from cloaknet.params import CloakParams, NoiseParams, share_width
from cloaknet.planner import plan
from cloaknet.protocols import BBGNProtocol, CloakProtocol
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy, load_chain_config
from mixnet.chain_render import write_chain_config
from mixnet.keys import read_key_file

KEYS = [SigningKey(bytes([index + 1]) * 32).verify_key for index in range(3)]
BIG_N = (1 << 65) + 1  # odd and beyond 64 bits

SINGLE_USER = {
    "mode": "single-user",
    "messages": 49,
    "modulus": "6823978031",
    "precision": 10000,
    "max_users": 1000,
    "noise_scale": "208333/1",
    "noise_q": "81028/43980465111",
}
SUM_PRESERVING = {
    "mode": "sum-preserving",
    "messages": 5,
    "modulus": str(BIG_N),
    "precision": 100000,
}


def make_config(protocol: dict[str, Any] | None = None, **policy: Any) -> ChainConfig:
    """A two-mix chain with round policy 100..1000 users unless overridden."""
    settings: dict[str, Any] = {"min_users": 100, "max_users": 1000, "deadline_seconds": 30.0,
                                "below_min": "wait"}
    settings.update(policy)
    return ChainConfig(
        chain_id="demo",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:9001", KEYS[0]),
               NodeInfo("mix2", "ws://127.0.0.1:9002", KEYS[1])),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:9100"),
        sink_table="analyzer",
        policy=RoundPolicy(**settings),
        sections={} if protocol is None else {"protocol": protocol},
    )


def cloak_params(chain: CloakChain) -> CloakParams:
    """The exact parameters of a chain that runs the cloak."""
    assert isinstance(chain.protocol, CloakProtocol)
    return chain.protocol.params


def single_user_params(max_users: int = 1000) -> CloakParams:
    return CloakParams(
        modulus=6823978031, precision=10000, messages=49, max_users=max_users,
        mode="single-user",
        noise=NoiseParams(scale=Fraction(208333), q=Fraction(81028, 43980465111)),
    )


# --------------------------------------------------------------------------- explicit params


def test_explicit_single_user_params() -> None:
    chain = chain_from_config(make_config(dict(SINGLE_USER)))
    assert cloak_params(chain) == single_user_params()
    assert chain.plan is None
    assert chain.messages == 49
    assert chain.payload_length == share_width(6823978031) == 5


def test_explicit_params_with_modulus_beyond_64_bits() -> None:
    chain = chain_from_config(make_config(dict(SUM_PRESERVING)))
    assert cloak_params(chain).modulus == BIG_N
    assert cloak_params(chain).max_users == 1000  # defaults to [round].max_users
    assert cloak_params(chain).noise is None
    assert chain.payload_length == 9
    as_int = chain_from_config(make_config({**SUM_PRESERVING, "modulus": 6823978031}))
    assert cloak_params(as_int).modulus == 6823978031


def test_fractions_may_be_integers_and_a_claim_that_holds_loads() -> None:
    protocol = {**SINGLE_USER, "noise_scale": 208333, "noise_q": "1",
                "users": 100, "colluders": 0, "epsilon": 1.0, "delta": 1e-6, "gamma": 0.25,
                "bound": "optimized"}
    chain = chain_from_config(make_config(protocol))
    assert cloak_params(chain).noise == NoiseParams(Fraction(208333), Fraction(1))


# --------------------------------------------------------------------------- planning


@pytest.mark.parametrize("mode", ["single-user", "sum-preserving"])
def test_plan_in_file(tmp_path: Path, mode: str) -> None:
    request = {"users": 100, "epsilon": 1.0, "delta": 1e-6, "mode": mode, "precision": 10000,
               "colluders": 0, "bound": "optimized"}
    path = tmp_path / "chain.toml"
    config = make_config({"plan": request})
    write_chain_config(path, config)
    chain = load_chain(path)
    expected = plan(100, 1.0, 1e-6, precision=10000, mode=mode, max_users=1000)
    assert chain.plan is not None
    assert cloak_params(chain) == expected.params == chain.plan.params
    assert cloak_params(chain).max_users == 1000
    assert chain.messages == expected.params.messages
    assert chain.config == config


def test_plan_users_default_to_min_users() -> None:
    chain = chain_from_config(
        make_config({"plan": {"epsilon": 1.0, "delta": 1e-6, "mode": "sum-preserving"}})
    )
    assert chain.plan is not None and chain.plan.users == 100
    assert cloak_params(chain).precision == 1000  # the planner's default 10·users


# --------------------------------------------------------------------------- round ranges

#: What ``cloaknet plan --users 1000 --max-users 10000 --mode sum-preserving --bound optimized
#: -e 1 -d 1e-6 --toml`` wrote before issue 11: Lemma 6 evaluated at 1,000 users only.
PLANNED_FOR_1000 = {
    "mode": "sum-preserving", "messages": 76, "modulus": "21384353075487", "precision": 10000,
    "max_users": 10000, "users": 1000, "colluders": 0, "epsilon": 0.9680701744705262,
    "delta": 9.99999998999201e-07, "gamma": 0.0004845195689269557, "bound": "optimized",
}


def test_sum_preserving_claim_is_checked_at_the_largest_round(tmp_path: Path) -> None:
    path = tmp_path / "chain.toml"
    write_chain_config(path, make_config(dict(PLANNED_FOR_1000), min_users=1000,
                                         max_users=10_000))
    with pytest.raises(ChainFileError) as info:
        load_chain(path)
    error = info.value
    assert error.field == "protocol.epsilon" and error.source == str(path)
    message = str(error)
    assert "\n" not in message and "Lemma 6" in message
    assert "[round].max_users = 10000" in message and "protocol.epsilon = 0.9681" in message
    assert "epsilon = 9.689" in message  # (n − 1)·ln β at n = 10,000
    # the same parameters hold for rounds of exactly 1,000 users ...
    chain = chain_from_config(make_config(dict(PLANNED_FOR_1000), min_users=1000,
                                          max_users=1000))
    assert cloak_params(chain).messages == 76
    # ... and without a claimed (epsilon, delta) there is nothing to check
    bare = {key: PLANNED_FOR_1000[key] for key in ("mode", "messages", "modulus", "precision")}
    chain_from_config(make_config(bare, min_users=1000, max_users=10_000))


def test_plan_in_file_is_made_for_the_largest_round() -> None:
    request = {"epsilon": 1.0, "delta": 1e-6, "mode": "sum-preserving", "bound": "optimized"}
    chain = chain_from_config(make_config({"plan": request}, min_users=1000, max_users=10_000))
    made = chain.plan
    assert made is not None and made.users == 1000 and made.evaluated_at_users == 10_000
    prm = made.params
    at_largest = acc.sum_preserving_bound(prm.messages, prm.modulus, made.gamma, 10_000 - 1)
    assert at_largest.epsilon <= 1.0 and at_largest.delta <= 1e-6
    # the written form of that plan loads back, its claim checked
    chain_from_config(make_config(protocol_section(prm, made), min_users=1000,
                                  max_users=10_000))


def test_plan_that_misses_its_target_in_some_round_is_refused() -> None:
    request = {"epsilon": 1.0, "delta": 1e-6, "mode": "sum-preserving", "bound": "theorem"}
    with pytest.raises(ChainFileError, match=r"protocol\.plan\.delta = 1e-06") as info:
        chain_from_config(make_config({"plan": request}, min_users=1000, max_users=10_000))
    assert info.value.field == "protocol.plan" and "[round].max_users = 10000" in str(info.value)
    made = plan(1000, 1.0, 1e-6, mode="sum-preserving", max_users=10_000)
    stale = dataclasses.replace(made, params=dataclasses.replace(made.params, max_users=20_000))
    with pytest.raises(ChainFileError, match=r"max_users = 20000"):  # not for 20,000 users
        CloakChain(make_config(min_users=1000, max_users=20_000),
                   CloakProtocol.from_plan(stale), stale)


def test_single_user_claim_is_still_checked_at_the_smallest_round() -> None:
    made = plan(100, 1.0, 1e-6, precision=10000, max_users=1000)
    assert made.evaluated_at_users == 100
    section = protocol_section(made.params, made)
    chain_from_config(make_config(section))  # rounds of 100..1000 users
    # claim what the parameters give at 1,000 users: false for rounds of 100 users
    prm = made.params
    assert prm.noise is not None
    at_1000 = acc.single_user_bound(prm.messages, prm.modulus, made.gamma, prm.precision,
                                    prm.noise.p, float(prm.noise.q), 1000)
    claim = {**section, "epsilon": at_1000.epsilon, "delta": at_1000.delta}
    with pytest.raises(ChainFileError, match=r"\[round\]\.min_users = 100 ") as info:
        chain_from_config(make_config(claim))
    assert info.value.field in ("protocol.epsilon", "protocol.delta")
    assert "Lemma 11" in str(info.value)
    chain_from_config(make_config(claim, min_users=1000))  # true when rounds have 1,000 users


def test_claim_without_gamma_cannot_be_checked() -> None:
    claim = {key: value for key, value in PLANNED_FOR_1000.items() if key != "gamma"}
    with pytest.raises(ChainFileError, match="missing") as info:
        chain_from_config(make_config(claim, min_users=1000, max_users=1000))
    assert info.value.field == "protocol.gamma"


# --------------------------------------------------------------------------- broken [protocol]

PLAN = {"users": 100, "epsilon": 1.0, "delta": 1e-6, "precision": 10000}

BROKEN: list[tuple[str, dict[str, Any] | None, str, str]] = [
    ("no protocol", None, "protocol", "missing table [protocol]"),
    ("unknown key", {**SINGLE_USER, "modulo": "7"}, "protocol.modulo", "unknown key"),
    ("bad mode", {**SINGLE_USER, "mode": "both"}, "protocol.mode", "expected one of"),
    ("no messages", {k: v for k, v in SINGLE_USER.items() if k != "messages"},
     "protocol.messages", "missing"),
    ("bool messages", {**SINGLE_USER, "messages": True}, "protocol.messages", "got boolean"),
    ("hex modulus", {**SINGLE_USER, "modulus": "0x1f"}, "protocol.modulus", "decimal"),
    ("float modulus", {**SINGLE_USER, "modulus": 6823978031.0}, "protocol.modulus", "got float"),
    ("even modulus", {**SINGLE_USER, "modulus": "6823978032"}, "protocol", "must be odd"),
    ("small modulus", {**SINGLE_USER, "modulus": "7"}, "protocol", "must exceed 3·n·k"),
    ("three messages", {**SINGLE_USER, "messages": 3}, "protocol", "m must be >= 4"),
    ("float scale", {**SINGLE_USER, "noise_scale": 208333.0}, "protocol.noise_scale",
     "got float (inexact)"),
    ("decimal scale", {**SINGLE_USER, "noise_scale": "2.5"}, "protocol.noise_scale",
     "exact fraction"),
    ("zero scale", {**SINGLE_USER, "noise_scale": "0/1"}, "protocol.noise_scale", "positive"),
    ("zero denominator", {**SINGLE_USER, "noise_q": "1/0"}, "protocol.noise_q", "zero denom"),
    ("q above one", {**SINGLE_USER, "noise_q": "3/2"}, "protocol.noise_q", "(0, 1]"),
    ("no noise", {k: v for k, v in SINGLE_USER.items() if k != "noise_q"},
     "protocol.noise_q", "missing"),
    ("noise in sum-preserving", {**SUM_PRESERVING, "noise_q": "1/2"}, "protocol.noise_q",
     "single-user mode only"),
    ("max_users below round", {**SINGLE_USER, "max_users": 999}, "protocol.max_users",
     "[round].max_users is 1000"),
    ("planned for too many", {**SINGLE_USER, "users": 101}, "protocol.users",
     "min_users = 100"),
    ("plan with explicit", {"plan": PLAN, "modulus": "7"}, "protocol.modulus",
     "not allowed together"),
    ("plan not table", {"plan": "yes"}, "protocol.plan", "expected a table"),
    ("plan max_users", {"plan": {**PLAN, "max_users": 5000}}, "protocol.plan.max_users",
     "[round].max_users"),
    ("plan unknown", {"plan": {**PLAN, "eps": 1.0}}, "protocol.plan.eps", "unknown key"),
    ("plan no delta", {"plan": {"epsilon": 1.0}}, "protocol.plan.delta", "missing"),
    ("plan str epsilon", {"plan": {**PLAN, "epsilon": "1"}}, "protocol.plan.epsilon",
     "expected a number"),
    ("plan bad delta", {"plan": {**PLAN, "delta": 2.0}}, "protocol.plan", "delta must lie"),
    ("plan bad mode", {"plan": {**PLAN, "mode": "x"}}, "protocol.plan.mode", "expected one of"),
    ("plan users", {"plan": {**PLAN, "users": 200}}, "protocol.plan.users",
     "planned for 200 users"),
    ("plan infeasible", {"plan": {**PLAN, "max_messages": 4}}, "protocol.plan",
     "at most 4 messages"),
]


@pytest.mark.parametrize(
    ("protocol", "field", "fragment"),
    [case[1:] for case in BROKEN],
    ids=[case[0] for case in BROKEN],
)
def test_broken_protocol_names_file_and_field(
    tmp_path: Path, protocol: dict[str, Any] | None, field: str, fragment: str
) -> None:
    path = tmp_path / "chain.toml"
    write_chain_config(path, make_config(protocol))
    with pytest.raises(ChainFileError) as info:
        load_chain(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {field}: "), message
    assert fragment in message, message
    assert (info.value.source, info.value.field) == (str(path), field)
    assert isinstance(info.value, CloakError) and isinstance(info.value, ValueError)


def test_generic_chain_errors_are_wrapped(tmp_path: Path) -> None:
    path = tmp_path / "chain.toml"
    path.write_text('[chain]\nid = "demo"\n', encoding="utf-8")
    with pytest.raises(ChainFileError) as info:
        load_chain(path)
    assert str(info.value) == f"{path}: mix: missing (at least one [[mix]] table is required)"
    assert info.value.field == "mix"


def test_error_survives_pickle_and_copy() -> None:
    error = ChainFileError("bad", source="c.toml", field="protocol.modulus")
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert isinstance(clone, ChainFileError)
        assert (clone.source, clone.field, clone.problem) == ("c.toml", "protocol.modulus", "bad")


# --------------------------------------------------------------------------- writing


def test_protocol_section_shapes() -> None:
    section = protocol_section(single_user_params())
    assert section == SINGLE_USER
    big = CloakParams(modulus=BIG_N, precision=10, messages=5, max_users=7)
    assert protocol_section(big)["modulus"] == str(BIG_N)
    assert "noise_scale" not in protocol_section(big)
    made = plan(100, 1.0, 1e-6, precision=10000, max_users=1000)
    section = protocol_section(made.params, made)
    assert made.params.noise is not None
    assert section["noise_scale"] == (
        f"{made.params.noise.scale.numerator}/{made.params.noise.scale.denominator}"
    )
    assert section["epsilon"] == made.epsilon and section["bound"] == "optimized"
    assert {"users", "colluders", "delta", "gamma"} <= set(section)
    with pytest.raises(ValueError, match="differ"):
        protocol_section(single_user_params(), made)


@pytest.mark.parametrize("with_plan", [False, True])
def test_write_then_load_round_trip(tmp_path: Path, with_plan: bool) -> None:
    made = plan(100, 1.0, 1e-6, precision=10000, max_users=1000) if with_plan else None
    params = made.params if made is not None else single_user_params()
    # any old [protocol] is replaced; other sections are kept
    config = dataclasses.replace(
        make_config(), sections={"protocol": {"stale": 1}, "notes": {"a": 1}}
    )
    path = tmp_path / "chain.toml"
    write_chain_file(path, config, params, made)
    chain = load_chain(path)
    assert cloak_params(chain) == params
    assert chain.plan is None  # explicit parameters in the file: nothing is re-planned
    assert chain.config.mixes == config.mixes and chain.config.policy == config.policy
    assert chain.config.sections["notes"] == {"a": 1}
    assert chain.config.sections["protocol"] == protocol_section(params, made)
    assert load_chain_config(path, sink_table="analyzer") == chain.config


def test_write_with_big_modulus_round_trips(tmp_path: Path) -> None:
    params = CloakParams(modulus=BIG_N, precision=100000, messages=5, max_users=1000)
    path = tmp_path / "chain.toml"
    write_chain_file(path, make_config(), params)
    assert f'modulus = "{BIG_N}"' in path.read_text(encoding="utf-8")
    assert cloak_params(load_chain(path)) == params


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "chain.toml"
    write_chain_file(path, make_config(), single_user_params())
    with pytest.raises(ChainFileError, match="already exists") as info:
        write_chain_file(path, make_config(min_users=50), single_user_params())
    assert info.value.source == str(path)
    assert load_chain(path).config.policy.min_users == 100
    write_chain_file(path, make_config(min_users=50), single_user_params(), overwrite=True)
    assert load_chain(path).config.policy.min_users == 50


def test_write_rejects_params_too_small_for_the_rounds(tmp_path: Path) -> None:
    path = tmp_path / "chain.toml"
    with pytest.raises(ChainFileError) as info:
        write_chain_file(path, make_config(), single_user_params(max_users=999))
    assert info.value.field == "protocol.max_users"
    assert not path.exists()


def test_cloak_chain_checks_its_invariants() -> None:
    with pytest.raises(ChainFileError, match=r"protocol\.max_users"):
        CloakChain(make_config(), CloakProtocol(single_user_params(max_users=500)))
    made = plan(100, 1.0, 1e-6, precision=10000, max_users=1000)
    with pytest.raises(ChainFileError, match=r"protocol\.plan\.users"):
        CloakChain(make_config(min_users=50), CloakProtocol.from_plan(made), made)
    with pytest.raises(ChainFileError, match="differ"):
        CloakChain(make_config(), CloakProtocol(single_user_params()), made)
    # the plan's users bind even when the protocol was built without the plan
    with pytest.raises(ChainFileError, match=r"protocol\.plan\.users"):
        CloakChain(make_config(min_users=50), CloakProtocol(made.params), made)
    with pytest.raises(TypeError):
        CloakChain(make_config(), made.params)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CloakChain(make_config(), CloakProtocol.from_plan(made), made.params)  # type: ignore[arg-type]
    chain = CloakChain(make_config(), CloakProtocol.from_plan(made), made)
    assert chain.messages == made.params.messages
    assert chain.payload_length == made.params.share_bytes
    assert chain.message_modulus == made.params.modulus


def test_chain_runs_a_comparison_protocol_only_for_its_round_size() -> None:
    bbgn = BBGNProtocol(100, 1.0, 1e-6)
    with pytest.raises(ChainFileError, match="exactly 100 users") as info:
        CloakChain(make_config(), bbgn)  # rounds of 100..1000 users
    assert info.value.field == "protocol.users"
    chain = CloakChain(make_config(min_users=100, max_users=100), bbgn)
    assert chain.messages == int(bbgn.messages_per_user)
    assert chain.payload_length == bbgn.bytes_per_message


# --------------------------------------------------------------------------- node keys


def test_generate_node_keys(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    names = ["mix1", "mix2", "analyzer"]
    public = generate_node_keys(directory, names)
    assert list(public) == names
    assert len({bytes(key) for key in public.values()}) == 3
    assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0
    for name in names:
        path = directory / f"{name}.key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert read_key_file(path).verify_key == public[name]


def test_generate_node_keys_refuses_existing_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "mix2.key").write_text("old", encoding="utf-8")
    with pytest.raises(ChainFileError, match="already exists"):
        generate_node_keys(tmp_path, ["mix1", "mix2"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix2.key"]
    (tmp_path / "mix2.key").chmod(0o600)
    public = generate_node_keys(tmp_path, ["mix1", "mix2"], overwrite=True)
    assert read_key_file(tmp_path / "mix2.key").verify_key == public["mix2"]


@pytest.mark.parametrize(
    ("names", "fragment"),
    [(["../evil"], "[A-Za-z0-9._-]"), (["a", "a"], "repeated"), ([""], "1 to 64")],
)
def test_generate_node_keys_rejects_bad_names(
    tmp_path: Path, names: list[str], fragment: str
) -> None:
    with pytest.raises(ChainFileError, match=re.escape(fragment)):
        generate_node_keys(tmp_path / "keys", names)
    assert not (tmp_path / "keys").exists()


def _named_config(protocol: dict[str, object], users: int = 500) -> ChainConfig:
    from mixnet.chain import NodeInfo, RoundPolicy
    from mixnet.keys import generate_identity

    return ChainConfig(
        chain_id="named",
        mixes=(NodeInfo("mix1", "ws://127.0.0.1:1", generate_identity().verify_key),),
        sink=NodeInfo("analyzer", "ws://127.0.0.1:2", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=users, max_users=users, deadline_seconds=10.0),
        sections={"protocol": protocol},
    )


def test_named_comparison_protocol_loads() -> None:
    chain = chain_from_config(_named_config(
        {"name": "bbgn", "users": 500, "epsilon": 1.0, "delta": 1e-6}))
    assert isinstance(chain.protocol, BBGNProtocol) and chain.plan is None
    assert chain.protocol.name == "bbgn"
    assert chain.messages == int(chain.protocol.messages_per_user)
    assert chain.payload_length == chain.protocol.bytes_per_message
    assert chain.message_modulus == chain.protocol.message_modulus


@pytest.mark.parametrize(
    ("protocol", "users", "field"),
    [
        ({"name": "nope", "users": 500, "epsilon": 1.0, "delta": 1e-6}, 500, "protocol.name"),
        ({"name": "bbgn", "users": 500, "epsilon": 1.0, "delta": 1e-6, "mode": "x"}, 500,
         "protocol.mode"),
        ({"name": "bbgn", "users": 400, "epsilon": 1.0, "delta": 1e-6}, 500, "protocol.users"),
        ({"name": "bbgn", "users": 500, "delta": 1e-6}, 500, "protocol.epsilon"),
        ({"name": "bbgn", "users": 500, "epsilon": "1", "delta": 1e-6}, 500, "protocol.epsilon"),
        ({"name": "blanket", "users": 50, "epsilon": 1.0, "delta": 1e-6}, 50, "protocol"),
    ],
)
def test_named_protocol_errors_name_the_field(
    protocol: dict[str, object], users: int, field: str
) -> None:
    with pytest.raises(ChainFileError) as info:
        chain_from_config(_named_config(protocol, users))
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_an_explicit_table_states_the_guarantee_its_results_carry() -> None:
    """Explicit parameters with a checked (epsilon, delta) give the protocol that guarantee
    (the analyzer publishes it with every estimate); without one it stays unknown (NaN)."""
    import math

    from cloaknet.plans import select_plan
    from cloaknet.protocol_table import selected_section

    chosen = select_plan(100, 1.0, 1e-6, bound="optimized", max_users=1000)
    table = selected_section(chosen)
    assert "epsilon" in table and "delta" in table and "modulus" in table
    chain = chain_from_config(make_config(table))
    assert chain.protocol.epsilon == float(table["epsilon"])
    assert chain.protocol.delta == float(table["delta"])
    bare = {k: v for k, v in table.items() if k not in ("epsilon", "delta", "gamma")}
    unknown = chain_from_config(make_config(bare)).protocol
    assert math.isnan(unknown.epsilon) and math.isnan(unknown.delta)
