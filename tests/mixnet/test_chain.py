"""Tests for mixnet.chain: parsing, validation, rendering and writing of chain files."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import os
import pickle
import tomllib
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nacl.signing import SigningKey, VerifyKey

import mixnet.core.policy
from mixnet.chain import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SINK_TABLE,
    MAX_CHUNK_SIZE,
    NAME_PATTERN,
    RESERVED_SECTIONS,
    ChainConfig,
    ChainConfigError,
    NodeInfo,
    PolicyError,
    RoundPolicy,
    host_port,
    load_chain_config,
    parse_chain_config,
)
from mixnet.chain_render import render_chain_config, render_table, write_chain_config
from mixnet.errors import MixnetError
from mixnet.keys import public_key_text

KEYS = [SigningKey(bytes([index]) * 32).verify_key for index in range(4)]


def valid_data() -> dict[str, Any]:
    """A valid parsed chain file with three mixes, the sink and a [protocol] table."""
    return {
        "chain": {"id": "demo"},
        "mix": [
            {"name": f"mix{index}", "url": f"ws://127.0.0.1:900{index}",
             "identity": public_key_text(KEYS[index])}
            for index in range(3)
        ],
        "sink": {"name": "sink", "url": "ws://127.0.0.1:9100",
                     "identity": public_key_text(KEYS[3])},
        "round": {"min_users": 100, "max_users": 1000, "deadline_seconds": 30.0,
                  "below_min": "wait", "chunk_size": 512},
        "protocol": {"mode": "single-user", "modulus": "6823978027", "messages": 49,
                     "plan": {"users": 100, "epsilon": 1.0}},
    }


def write(tmp_path: Path, text: str, name: str = "chain.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- valid files


def test_parse_valid_file() -> None:
    config = parse_chain_config(valid_data(), source="chain.toml")
    assert config.chain_id == "demo"
    assert [mix.name for mix in config.mixes] == ["mix0", "mix1", "mix2"]
    assert all(isinstance(mix.identity, VerifyKey) for mix in config.mixes)
    assert config.mixes[1].identity == KEYS[1]
    assert config.sink == NodeInfo("sink", "ws://127.0.0.1:9100", KEYS[3])
    assert config.policy == RoundPolicy(100, 1000, 30.0, "wait", 512)
    assert dict(config.sections) == {"protocol": valid_data()["protocol"]}


def test_navigation_helpers() -> None:
    config = parse_chain_config(valid_data(), source="chain.toml")
    assert config.nodes == (*config.mixes, config.sink)
    assert config.node("mix1") is config.mixes[1]
    assert config.node("sink") is config.sink
    assert [config.hop_of(name) for name in ("mix0", "mix1", "mix2", "sink")] == [0, 1, 2, 3]
    assert config.successor("mix0") == config.mixes[1]
    assert config.successor("mix2") == config.sink
    assert config.successor("sink") is None
    for call in (config.node, config.hop_of, config.successor):
        with pytest.raises(ChainConfigError, match="unknown node 'nope'"):
            call("nope")


def test_defaults_and_optional_analyzer_identity() -> None:
    data = valid_data()
    del data["round"]["chunk_size"]
    del data["sink"]["identity"]
    del data["protocol"]
    data["round"]["deadline_seconds"] = 5  # an integer is fine, stored as a float
    config = parse_chain_config(data, source="x")
    assert config.policy.chunk_size == DEFAULT_CHUNK_SIZE
    assert config.policy.deadline_seconds == 5.0
    assert isinstance(config.policy.deadline_seconds, float)
    assert config.sink.identity is None
    assert dict(config.sections) == {}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ws://127.0.0.1:9001", ("127.0.0.1", 9001)),
        ("wss://Node-1.Example.org:443/", ("node-1.example.org", 443)),
        ("ws://[::1]:8080", ("::1", 8080)),
        ("ws://localhost:1", ("localhost", 1)),
    ],
)
def test_host_port(url: str, expected: tuple[str, int]) -> None:
    assert host_port(url) == expected
    assert NodeInfo("n", url).endpoint == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://x:80", "ws://x", "ws://:80", "ws://x:0", "ws://x:70000", "ws://x:port",
        "ws://x:80/path", "ws://x:80?q=1", "ws://x:80#f", "ws://user@x:80", "ws://x:80?",
        " ws://x:80", "ws://x :80", "ws://[nothost]:80", "ws://ex\u00e4mple:80", "ws://a/b:80",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ChainConfigError) as info:
        host_port(url)
    assert info.value.field == "url"
    with pytest.raises(ChainConfigError):
        NodeInfo("n", url)


# --------------------------------------------------------------------------- round trips


def test_render_then_load_is_equal(tmp_path: Path) -> None:
    config = parse_chain_config(valid_data(), source="x")
    text = render_chain_config(config)
    assert load_chain_config(write(tmp_path, text)) == config
    assert tomllib.loads(text) == valid_data()


def test_round_trip_of_awkward_sections(tmp_path: Path) -> None:
    data = valid_data()
    del data["sink"]["identity"]
    data["protocol"] = {
        "text": 'quote " backslash \\ tab \t newline \n cr \r bell \x07 del \x7f é ✓',
        "big": -(1 << 63),
        "float": 1e-300,
        "inf": float("inf"),
        "yes": True,
        "no": False,
        "list": [1, "two", 3.5, [True]],
        "inline": {"users": 100, "deep": {"x": "y"}, "empty": {}},
        "a key with spaces": "ok",
        "ключ": 1,
    }
    data["empty"] = {}
    config = parse_chain_config(data, source="x")
    loaded = load_chain_config(write(tmp_path, render_chain_config(config)))
    assert loaded == config
    assert list(loaded.sections) == ["protocol", "empty"]
    assert loaded.sink.identity is None


# Strategies for whole valid chains (property test: render -> parse -> equal).
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
NAMES = st.from_regex(NAME_PATTERN, fullmatch=True)
HOSTS = st.sampled_from(
    ["127.0.0.1", "localhost", "Node-1.Example.org", "[::1]", "[2001:db8::7]", "10.0.0.7"]
)
SCHEMES, SLASHES = st.sampled_from(["ws", "wss"]), st.sampled_from(["", "/"])
DEADLINES = st.floats(min_value=0, exclude_min=True, allow_infinity=False) | st.integers(1, 10**6)
IDENTITIES = st.binary(min_size=32, max_size=32).map(lambda seed: SigningKey(seed).verify_key)
OFFSETS = st.integers(-1439, 1439).map(
    lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
)
SCALARS = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"])), st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(allow_nan=False), st.booleans(),
    st.dates(), st.times(), st.datetimes(), st.datetimes(timezones=OFFSETS),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
SECTIONS = st.dictionaries(
    TEXT.filter(lambda name: name not in RESERVED_SECTIONS and name != DEFAULT_SINK_TABLE),
    st.dictionaries(TEXT, VALUES, max_size=5),
    max_size=3,
)


@st.composite
def chains(draw: st.DrawFn) -> ChainConfig:
    """A random valid :class:`ChainConfig` (1 to 4 mixes, sink with or without key)."""
    size = draw(st.integers(2, 5))  # 1 to 4 mixes and the sink
    names = draw(st.lists(NAMES, min_size=size, max_size=size, unique=True))
    ports = draw(st.lists(st.integers(1, 65535), min_size=size, max_size=size, unique=True))
    urls = [f"{draw(SCHEMES)}://{draw(HOSTS)}:{port}{draw(SLASHES)}" for port in ports]
    mixes = tuple(
        NodeInfo(name, url, draw(IDENTITIES))
        for name, url in zip(names[:-1], urls[:-1], strict=True)
    )
    sink = NodeInfo(names[-1], urls[-1], draw(st.none() | IDENTITIES))
    min_users = draw(st.integers(1, 10**9))
    policy = RoundPolicy(
        min_users=min_users,
        max_users=min_users + draw(st.integers(0, 10**9)),
        deadline_seconds=draw(DEADLINES),
        below_min=draw(st.sampled_from(["wait", "abort"])),
        chunk_size=draw(st.integers(1, MAX_CHUNK_SIZE)),
    )
    return ChainConfig(
        chain_id=draw(NAMES), mixes=mixes, sink=sink, policy=policy,
        sections=draw(SECTIONS),
    )


@given(chains())
def test_any_valid_chain_round_trips(config: ChainConfig) -> None:
    text = render_chain_config(config)
    loaded = parse_chain_config(tomllib.loads(text), source="y")
    assert loaded == config
    assert list(loaded.sections) == list(config.sections)
    assert dict(loaded.sections) == dict(config.sections)


UTC_PLUS_15S = datetime.timezone(datetime.timedelta(seconds=15))
UNWRITABLE: list[dict[Any, Any]] = [
    {"n": 1 << 64}, {"n": -(1 << 63) - 1}, {"n": [1, [1 << 63]]}, {"n": None},
    {"n": {"deep": None}}, {"n": b"bytes"}, {"n": Decimal("1.5")}, {"n": "\ud800"},
    {"\ud800": 1}, {1: 2}, {"n": {2: 3}}, {"n": datetime.time(1, 2, tzinfo=datetime.UTC)},
    {"n": datetime.datetime(2000, 1, 1, tzinfo=UTC_PLUS_15S)},
]


@pytest.mark.parametrize("bad", UNWRITABLE, ids=repr)
def test_render_rejects_values_toml_cannot_hold(bad: dict[Any, Any]) -> None:
    base = parse_chain_config(valid_data(), source="x")
    config = dataclasses.replace(base, sections={"protocol": bad})
    with pytest.raises(ValueError):
        render_chain_config(config)
    with pytest.raises(ValueError):
        render_table("protocol", bad)


def test_render_rejects_wrong_arguments() -> None:
    with pytest.raises(TypeError):
        render_chain_config(valid_data())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        render_table("protocol", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        render_table(1, {})  # type: ignore[arg-type]


def test_one_policy_type() -> None:
    assert RoundPolicy is mixnet.core.policy.RoundPolicy
    assert PolicyError is mixnet.core.policy.PolicyError
    assert DEFAULT_CHUNK_SIZE == mixnet.core.policy.DEFAULT_CHUNK_SIZE
    assert MAX_CHUNK_SIZE == mixnet.core.policy.MAX_CHUNK_SIZE
    assert isinstance(parse_chain_config(valid_data(), source="x").policy,
                      mixnet.core.policy.RoundPolicy)


def test_rendered_layout() -> None:
    text = render_chain_config(parse_chain_config(valid_data(), source="x"))
    mixes = "".join(
        f'[[mix]]\nname = "mix{index}"\nurl = "ws://127.0.0.1:900{index}"\n'
        f'identity = "{public_key_text(KEYS[index])}"\n\n'
        for index in range(3)
    )
    assert text == (
        '[chain]\nid = "demo"\n\n'
        + mixes
        + '[sink]\nname = "sink"\nurl = "ws://127.0.0.1:9100"\n'
        f'identity = "{public_key_text(KEYS[3])}"\n\n'
        "[round]\nmin_users = 100\nmax_users = 1000\ndeadline_seconds = 30.0\n"
        'below_min = "wait"\nchunk_size = 512\n\n'
        '[protocol]\nmode = "single-user"\nmodulus = "6823978027"\nmessages = 49\n\n'
        "[protocol.plan]\nusers = 100\nepsilon = 1.0\n"
    )


def test_short_mixes_are_still_tables_of_an_array() -> None:
    config = ChainConfig(
        chain_id="c",
        mixes=(NodeInfo("a", "ws://a:1", KEYS[0]), NodeInfo("b", "ws://b:2", KEYS[1])),
        sink=NodeInfo("z", "ws://z:3"),
        policy=RoundPolicy(1, 1, 1),
    )
    text = render_chain_config(config)
    assert text.count("[[mix]]\n") == 2 and "mix =" not in text
    assert parse_chain_config(tomllib.loads(text), source="x") == config


def test_render_table_loads_back() -> None:
    table: dict[str, Any] = {
        "name": "bbgn",
        "users": 100,
        "nested": {"deep": {"x": [1, 2]}, "empty": {}},
        "rows": [{"a": "x" * 120}, {"b": 2}],
        "short_rows": [{"a": 1}],
        "after": datetime.date(2024, 2, 29),
    }
    text = render_table("protocol", table)
    assert text.startswith('[protocol]\nname = "bbgn"\n')
    assert tomllib.loads(text) == {"protocol": table}
    assert render_table("empty", {}) == "[empty]\n"
    assert render_table("a b", {"k": 1}) == '["a b"]\nk = 1\n'


def test_sections_are_a_read_only_copy() -> None:
    data = valid_data()
    config = parse_chain_config(data, source="x")
    data["protocol"]["plan"]["users"] = 5
    assert config.sections["protocol"]["plan"]["users"] == 100
    with pytest.raises(TypeError):
        config.sections["other"] = {}  # type: ignore[index]
    assert hash(config) == hash(dataclasses.replace(config))


# --------------------------------------------------------------------------- broken files

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: object) -> Mutation:
    """A mutation that sets ``data[a][b]...`` (list indices allowed) to ``value``."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


def _delete(path: str) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        del target[last]

    return mutate


BROKEN: list[tuple[str, Mutation, str, str]] = [
    ("no chain", _delete("chain"), "chain", "missing"),
    ("chain not table", _set("chain", "demo"), "chain", "expected a table"),
    ("no chain id", _delete("chain.id"), "chain.id", "missing"),
    ("bad chain id", _set("chain.id", "a b"), "chain.id", "[A-Za-z0-9._-]"),
    ("long chain id", _set("chain.id", "x" * 65), "chain.id", "1 to 64"),
    ("int chain id", _set("chain.id", 7), "chain.id", "expected a string, got integer"),
    ("unknown chain key", _set("chain.name", "x"), "chain.name", "unknown key"),
    ("no mixes", _delete("mix"), "mix", "missing"),
    ("empty mixes", _set("mix", []), "mix", "at least one mix"),
    ("mix not array", _set("mix", {"name": "a"}), "mix", "expected an array"),
    ("mix not table", _set("mix.0", 3), "mix[0]", "expected a table"),
    ("http url", _set("mix.2.url", "http://x"), "mix[2].url", "expected ws:// or wss:// URL"),
    ("url no port", _set("mix.0.url", "ws://h"), "mix[0].url", "host and port"),
    ("url path", _set("mix.0.url", "ws://h:1/p"), "mix[0].url", "no user, path"),
    ("url int", _set("mix.1.url", 9001), "mix[1].url", "expected a string"),
    ("no mix url", _delete("mix.1.url"), "mix[1].url", "missing"),
    ("no mix name", _delete("mix.1.name"), "mix[1].name", "missing"),
    ("no identity", _delete("mix.0.identity"), "mix[0].identity", "missing"),
    ("bad identity", _set("mix.0.identity", "not base64!"), "mix[0].identity", "base64"),
    ("short identity", _set("mix.0.identity", "AAAA"), "mix[0].identity", "32 bytes"),
    ("identity int", _set("mix.0.identity", 1), "mix[0].identity", "expected a string"),
    ("unknown mix key", _set("mix.1.secret", "s3cr3t"), "mix[1].secret", "unknown key"),
    ("dup mix name", _set("mix.1.name", "mix0"), "mix[1].name", "duplicate node name 'mix0'"),
    ("dup sink name", _set("sink.name", "mix2"), "sink.name", "also mix[2].name"),
    ("dup url", _set("mix.2.url", "ws://127.0.0.1:9000/"), "mix[2].url", "same host and port"),
    ("dup sink url", _set("sink.url", "wss://127.0.0.1:9001"), "sink.url",
     "as mix[1].url"),
    ("no sink", _delete("sink"), "sink", "missing"),
    ("sink url", _set("sink.url", "ws://a"), "sink.url", "host and port"),
    ("unknown sink key", _set("sink.port", 1), "sink.port", "unknown key"),
    ("no round", _delete("round"), "round", "missing"),
    ("no min_users", _delete("round.min_users"), "round.min_users", "missing"),
    ("no deadline", _delete("round.deadline_seconds"), "round.deadline_seconds", "missing"),
    ("no below_min", _delete("round.below_min"), "round.below_min", "missing"),
    ("bool min_users", _set("round.min_users", True), "round.min_users", "got boolean"),
    ("float max_users", _set("round.max_users", 10.0), "round.max_users", "got float"),
    ("zero min_users", _set("round.min_users", 0), "round.min_users", ">= 1"),
    ("max < min", _set("round.max_users", 99), "round.max_users", "min_users (100)"),
    ("zero deadline", _set("round.deadline_seconds", 0.0), "round.deadline_seconds", "> 0"),
    ("inf deadline", _set("round.deadline_seconds", float("inf")), "round.deadline_seconds",
     "finite"),
    ("str deadline", _set("round.deadline_seconds", "30"), "round.deadline_seconds",
     "got string"),
    ("bool deadline", _set("round.deadline_seconds", True), "round.deadline_seconds",
     "got boolean"),
    ("below_min", _set("round.below_min", "later"), "round.below_min", '"wait" or "abort"'),
    ("zero chunk", _set("round.chunk_size", 0), "round.chunk_size", "in 1..65536, got 0"),
    ("huge chunk", _set("round.chunk_size", 65537), "round.chunk_size", "in 1..65536"),
    ("str chunk", _set("round.chunk_size", "9"), "round.chunk_size", "integer, got string"),
    ("int below_min", _set("round.below_min", 1), "round.below_min", "string, got integer"),
    ("long below_min", _set("round.below_min", "x" * 10_000), "round.below_min", "'xxx"),
    ("unknown round key", _set("round.deadline", 3), "round.deadline", "unknown key"),
    ("top-level scalar", _set("version", 1), "version", "expected a table"),
    ("top-level array", _set("extra", [{"a": 1}]), "extra", "expected a table, got array"),
]


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [case[1:] for case in BROKEN],
    ids=[case[0] for case in BROKEN],
)
def test_broken_data_names_the_field(mutate: Mutation, field: str, fragment: str) -> None:
    data = valid_data()
    mutate(data)
    with pytest.raises(ChainConfigError) as info:
        parse_chain_config(data, source="chain.toml")
    error = info.value
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"chain.toml: {field}: ")
    assert fragment in message
    assert (error.source, error.field) == ("chain.toml", field)
    assert error.code == "bad-chain-config"
    assert isinstance(error, MixnetError) and isinstance(error, ValueError)
    assert "s3cr3t" not in message
    assert len(message) < 200


def test_broken_file_on_disk_names_the_file(tmp_path: Path) -> None:
    data = valid_data()
    data["mix"][2]["url"] = "http://x"
    text = render_chain_config(parse_chain_config(valid_data(), source="x"))
    text = text.replace('url = "ws://127.0.0.1:9002"', 'url = "http://x"')
    path = write(tmp_path, text)
    with pytest.raises(ChainConfigError) as info:
        load_chain_config(path)
    assert str(info.value) == (
        f"{path}: mix[2].url: expected ws:// or wss:// URL with host and port, got 'http://x'"
    )


def test_toml_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[chain]\nid = "demo"\n\n[[mix]]\nname = \n')
    with pytest.raises(ChainConfigError) as info:
        load_chain_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "line 5" in message


def test_duplicate_toml_key_is_a_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, '[chain]\nid = "a"\nid = "b"\n')
    with pytest.raises(ChainConfigError, match="invalid TOML"):
        load_chain_config(path)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ChainConfigError, match="cannot read chain file") as info:
        load_chain_config(tmp_path / "missing.toml")
    assert info.value.source == str(tmp_path / "missing.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'[chain]\nid = "\xff"\n')
    with pytest.raises(ChainConfigError, match="not UTF-8"):
        load_chain_config(binary)
    with pytest.raises(ChainConfigError, match="cannot read chain file"):
        load_chain_config(tmp_path)


def test_oversized_file(tmp_path: Path) -> None:
    path = write(tmp_path, "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ChainConfigError, match="larger than"):
        load_chain_config(path)


def test_top_level_not_a_table() -> None:
    with pytest.raises(ChainConfigError, match=r"^src: expected a table"):
        parse_chain_config([], source="src")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- construction


def test_direct_construction_is_validated() -> None:
    good = parse_chain_config(valid_data(), source="x")
    with pytest.raises(ChainConfigError) as info:
        NodeInfo("bad name", "ws://h:1")
    assert info.value.field == "name"
    with pytest.raises(ChainConfigError) as info:
        NodeInfo("n", "ws://h:1", identity=b"\x00" * 32)  # type: ignore[arg-type]
    assert info.value.field == "identity"
    with pytest.raises(PolicyError) as policy_info:
        RoundPolicy(10, 5, 1.0)
    assert policy_info.value.field == "max_users"
    assert not isinstance(policy_info.value, ChainConfigError)
    assert isinstance(policy_info.value, ValueError)
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, policy=object())  # type: ignore[arg-type]
    assert info.value.field == "round"
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, mixes=(NodeInfo("m", "ws://h:1"),))
    assert info.value.field == "mix[0].identity"
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, mixes=())
    assert info.value.field == "mix"
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, sections={"round": {}})
    assert info.value.field == "round"
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, sections={"protocol": 1})
    assert info.value.field == "protocol"
    with pytest.raises(ChainConfigError) as info:
        dataclasses.replace(good, chain_id="")
    assert info.value.field == "chain.id"
    listed = dataclasses.replace(good, mixes=list(good.mixes))  # type: ignore[arg-type]
    assert listed.mixes == good.mixes and isinstance(listed.mixes, tuple)


def test_error_survives_pickle_and_copy() -> None:
    error = ChainConfigError("bad\nthing", source="f.toml", field="mix[0].url")
    assert str(error) == "f.toml: mix[0].url: bad thing"
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert isinstance(clone, ChainConfigError)
        assert (clone.source, clone.field, clone.problem) == ("f.toml", "mix[0].url", "bad thing")
        assert str(clone) == str(error)


# --------------------------------------------------------------------------- writing


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    config = parse_chain_config(valid_data(), source="x")
    path = tmp_path / "chain.toml"
    write_chain_config(path, config)
    assert load_chain_config(path) == config
    other = dataclasses.replace(config, chain_id="other")
    with pytest.raises(ChainConfigError, match="already exists"):
        write_chain_config(path, other)
    assert load_chain_config(path).chain_id == "demo"
    write_chain_config(path, other, overwrite=True)
    assert load_chain_config(path).chain_id == "other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.toml"]


def test_written_file_mode_and_contents(tmp_path: Path) -> None:
    config = parse_chain_config(valid_data(), source="x")
    umask = os.umask(0o022)
    os.umask(umask)
    for overwrite in (False, True):
        path = tmp_path / "chain.toml"
        write_chain_config(path, config, overwrite=overwrite)
        assert path.stat().st_mode & 0o777 == 0o644 & ~umask
        assert path.read_text(encoding="utf-8") == render_chain_config(config)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.toml"]


def test_unwritable_config_leaves_no_file(tmp_path: Path) -> None:
    base = parse_chain_config(valid_data(), source="x")
    config = dataclasses.replace(base, sections={"protocol": {"n": None}})
    with pytest.raises(ValueError):
        write_chain_config(tmp_path / "chain.toml", config)
    assert list(tmp_path.iterdir()) == []


def test_ownership_proofs_are_off_by_default_and_round_trip(tmp_path: Path) -> None:
    assert parse_chain_config(valid_data(), source="x").ownership_proofs is False
    data = valid_data()
    data["chain"]["ownership_proofs"] = True
    config = parse_chain_config(data, source="x")
    assert config.ownership_proofs is True
    text = render_chain_config(config)
    assert "ownership_proofs = true" in text
    assert load_chain_config(write(tmp_path, text)) == config


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_ownership_proofs_must_be_a_boolean(value: object) -> None:
    data = valid_data()
    data["chain"]["ownership_proofs"] = value
    with pytest.raises(ChainConfigError, match=r"chain\.ownership_proofs"):
        parse_chain_config(data, source="x")
