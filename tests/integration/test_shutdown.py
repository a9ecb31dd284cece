"""A real `cloaknet node` process: SIGTERM ends it within 3 s even while its link to the
successor is failing and a client waits for a round; everything it creates is mode 0600;
`--log-format json` writes one JSON object per line."""

from __future__ import annotations

import json
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mixnet.wire import encode_frame
from tests.integration.node_process import HOST, node_process, wait_healthy, write_chain

#: The issue's bound on a node's exit after SIGTERM, in seconds.
EXIT_WITHIN = 3.0


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    limit = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < limit, f"{path.name} was never created"
        time.sleep(0.05)


def _modes(directory: Path, names: list[str]) -> dict[str, int]:
    return {name: stat.S_IMODE((directory / name).stat().st_mode) for name in names}


def test_sigterm_with_a_failing_link_and_a_waiting_client_exits_fast_and_files_are_private(
    tmp_path: Path,
) -> None:
    chain, ports = write_chain(tmp_path, mixes=2)  # mix2 and the analyzer never start
    before = set(p.name for p in tmp_path.iterdir())
    log = tmp_path / "mix1.log"
    args = ["--chain", str(chain), "--name", "mix1", "--key", str(tmp_path / "mix1.key"),
            "--log-format", "json", "--log-file", str(log)]
    with node_process(args, tmp_path / "stderr.txt") as proc:
        wait_healthy(ports[0], proc)
        _wait_for(tmp_path / "mix1.db-wal")  # the opening round is stored
        # a client asks for a round, which cannot open: the node holds the request
        waiting = threading.Event()
        outcome: list[str] = []

        def ask() -> None:
            with connect(f"ws://{HOST}:{ports[0]}", open_timeout=5) as ws:
                ws.send(encode_frame({"v": 1, "type": "get-round"}))
                waiting.set()
                try:
                    ws.recv(timeout=30)
                    outcome.append("answered")
                except ConnectionClosed:
                    outcome.append("closed")
                except TimeoutError:
                    outcome.append("timeout")

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        assert waiting.wait(10)
        time.sleep(1.5)  # the link has failed and backed off a few times meanwhile
        created = sorted(set(p.name for p in tmp_path.iterdir()) - before - {"stderr.txt"})
        modes = _modes(tmp_path, created)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        elapsed = time.monotonic() - started
        client.join(10)
    assert code == 0, (tmp_path / "stderr.txt").read_text()
    assert elapsed < EXIT_WITHIN, f"exited {elapsed:.2f} s after SIGTERM"
    assert outcome == ["closed"]
    # every file the node created: database, its -wal and -shm, the log
    assert {"mix1.db", "mix1.db-wal", "mix1.db-shm", "mix1.log"} <= set(created), created
    assert modes == {name: 0o600 for name in created}
    assert stat.S_IMODE((tmp_path / "mix1.key").stat().st_mode) == 0o600
    # the JSON log: one object per line, with the node's name; link failures give a reason
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records and all(
        {"time", "level", "logger", "message", "node"} <= set(r) and r["node"] == "mix1"
        for r in records
    )
    failures = [r["message"] for r in records if "failed (" in r["message"]]
    assert failures and all("failed ()" not in m and "ConnectionRefusedError" in m
                            for m in failures)
    assert any(r["message"] == "mix1 stopped" for r in records)
    assert not any(r["logger"].startswith("websockets") and r["level"] == "INFO"
                   for r in records)
    print(f"SIGTERM -> exit in {elapsed:.2f} s")


def test_node_help_lists_every_endpoint_and_the_new_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cloaknet.cli import main
    from mixnet.node import HTTP_ROUTES

    with pytest.raises(SystemExit):
        main(["node", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for route, _ in HTTP_ROUTES:
        assert f"GET {route}" in text
    for analyzer_route in ("GET / ", "GET /rounds ", "GET /rounds/<id>"):
        assert analyzer_route in text
    for option in ("--tls-cert FILE", "--tls-key FILE", "--log-format {text,json}",
                   "--log-file FILE"):
        assert option in text


def test_sigterm_with_a_silent_successor_and_silent_clients_exits_fast(tmp_path: Path) -> None:
    """The successor accepts TCP connections but never answers (the link hangs in its
    opening handshake); one client finished its websocket handshake and then ignores
    everything (it never answers the closing handshake), another never sent a byte."""
    chain, ports = write_chain(tmp_path, mixes=2)
    with socket.socket() as successor:
        successor.bind((HOST, ports[1]))
        successor.listen(16)  # never accepted: connects succeed, nothing is ever answered
        args = ["--chain", str(chain), "--name", "mix1", "--key", str(tmp_path / "mix1.key")]
        with node_process(args, tmp_path / "stderr.txt") as proc:
            wait_healthy(ports[0], proc)
            silent = socket.create_connection((HOST, ports[0]))
            silent.sendall(
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\n\r\n"
            )
            mute = socket.create_connection((HOST, ports[0]))
            time.sleep(1.0)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            elapsed = time.monotonic() - started
            silent.close()
            mute.close()
    assert code == 0, (tmp_path / "stderr.txt").read_text()
    assert elapsed < EXIT_WITHIN, f"exited {elapsed:.2f} s after SIGTERM"
    print(f"SIGTERM -> exit in {elapsed:.2f} s")
