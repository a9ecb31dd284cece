"""The chain file's [tls] and [limits] tables (mixnet.chain, mixnet.tls, mixnet.limits)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trustme

from mixnet.chain import (
    DEFAULT_LIMITS,
    ChainConfigError,
    Limits,
    TlsConfig,
    load_chain_config,
    parse_chain_config,
)
from mixnet.chain_render import render_chain_config, write_chain_config
from mixnet.limits import LimitsError
from mixnet.tls import TlsError, check_server_tls, client_context, server_context
from tests.mixnet.test_chain import valid_data, write


def test_limits_defaults_and_ranges() -> None:
    assert Limits() == DEFAULT_LIMITS
    assert Limits().table() == {
        "max_connections": 512,
        "max_submissions_per_connection": 1000,
        "max_submissions_per_frame": 256,
        "idle_seconds": 60.0,
        "handshake_seconds": 10.0,
    }
    limits = Limits(max_connections=3, idle_seconds=2)
    assert limits.idle_seconds == 2.0 and isinstance(limits.idle_seconds, float)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_connections": 0}, "max_connections"),
        ({"max_connections": 70000}, "max_connections"),
        ({"max_connections": True}, "max_connections"),
        ({"max_submissions_per_connection": 0}, "max_submissions_per_connection"),
        ({"max_submissions_per_frame": 5000}, "max_submissions_per_frame"),
        ({"idle_seconds": 0}, "idle_seconds"),
        ({"idle_seconds": float("inf")}, "idle_seconds"),
        ({"handshake_seconds": "10"}, "handshake_seconds"),
    ]
    for kwargs, field in cases:
        with pytest.raises(LimitsError) as info:
            Limits(**kwargs)
        assert info.value.field == field


def test_limits_table_parses_with_defaults_and_round_trips(tmp_path: Path) -> None:
    data = valid_data()
    data["limits"] = {"max_connections": 64, "idle_seconds": 5}
    config = parse_chain_config(data, source="c.toml")
    assert config.limits == Limits(max_connections=64, idle_seconds=5.0)
    assert "limits" not in config.sections
    text = render_chain_config(config)
    assert tomllib.loads(text)["limits"] == config.limits.table()
    assert load_chain_config(write(tmp_path, text)) == config
    # the defaults are not written
    assert "[limits]" not in render_chain_config(parse_chain_config(valid_data(), source="x"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"max_connections": 0}, "c.toml: limits.max_connections: must be in 1..65536, got 0"),
        ({"idle_seconds": "60"}, "c.toml: limits.idle_seconds: expected a number, got str"),
        ({"max_conections": 5}, "c.toml: limits.max_conections: unknown key"),
        ("none", "c.toml: limits: expected a table, got string"),
    ],
)
def test_bad_limits_are_one_line_errors(table: object, message: str) -> None:
    data = valid_data()
    data["limits"] = table
    with pytest.raises(ChainConfigError) as info:
        parse_chain_config(data, source="c.toml")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_tls_ca_is_relative_to_the_chain_file_and_is_checked(tmp_path: Path) -> None:
    ca = trustme.CA()
    folder = tmp_path / "chain"
    folder.mkdir()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    data = valid_data()
    data["tls"] = {"ca": "ca.pem"}
    text = render_chain_config(parse_chain_config(data, source="x"))
    assert 'ca = "ca.pem"' in text
    path = write(folder, text)
    elsewhere = os.getcwd()
    os.chdir(tmp_path)  # the CA is found next to the chain file, not in the cwd
    try:
        config = load_chain_config(Path("chain") / "chain.toml")
    finally:
        os.chdir(elsewhere)
    assert config.tls == TlsConfig(folder / "ca.pem")
    assert config.tls is not None and config.tls.ca.is_absolute()
    assert "tls" not in config.sections
    # written next to the CA, the path stays relative; loaded back, it is equal
    write_chain_config(folder / "again.toml", config)
    assert 'ca = "ca.pem"' in (folder / "again.toml").read_text()
    assert load_chain_config(folder / "again.toml") == config
    assert load_chain_config(path) == config

    (folder / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(ChainConfigError) as info:
        load_chain_config(path)
    assert str(info.value).startswith(f"{path}: tls.ca: cannot use CA bundle")
    (folder / "ca.pem").unlink()
    with pytest.raises(ChainConfigError, match=r"tls\.ca: cannot use CA bundle .*ca\.pem"):
        load_chain_config(path)


@pytest.mark.parametrize(
    ("table", "field"),
    [({}, "tls.ca"), ({"ca": 1}, "tls.ca"), ({"ca": ""}, "tls.ca"),
     ({"ca": "x", "cert": "y"}, "tls.cert")],
)
def test_bad_tls_tables(table: dict[str, Any], field: str) -> None:
    data = valid_data()
    data["tls"] = table
    with pytest.raises(ChainConfigError) as info:
        parse_chain_config(data, source="c.toml")
    assert info.value.field == field


def test_tls_contexts_and_the_url_check(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "both.pem"))
    assert client_context(tmp_path / "ca.pem").get_ca_certs()
    server_context(tmp_path / "cert.pem", tmp_path / "key.pem")
    server_context(tmp_path / "both.pem")
    other = trustme.CA().issue_cert("127.0.0.1")
    other.private_key_pem.write_to_path(str(tmp_path / "other-key.pem"))
    with pytest.raises(TlsError, match="cannot load TLS certificate and key"):
        server_context(tmp_path / "cert.pem", tmp_path / "other-key.pem")
    with pytest.raises(TlsError, match="No such file"):
        server_context(tmp_path / "missing.pem")
    with pytest.raises(TlsError, match=r"holds no CA certificate|cannot use CA bundle"):
        client_context(tmp_path / "key.pem")

    check_server_tls("m", "wss://h:1", has_certificate=True)
    check_server_tls("m", "ws://h:1", has_certificate=False)
    with pytest.raises(TlsError, match="wss:// URL, but has no TLS certificate"):
        check_server_tls("m", "wss://h:1", has_certificate=False)
    with pytest.raises(TlsError, match="ws:// URL, but was given a TLS certificate"):
        check_server_tls("m", "ws://h:1", has_certificate=True)
