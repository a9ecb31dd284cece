"""Peel worker processes of real ``cloaknet node`` mixes: how many each mix starts
(``--peel-processes``), an exact round through them, and that they end with their node —
stopped, or killed with SIGKILL (the kernel closes the node's end of their pipe)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import connect
from cloaknet.encoding import quantize
from tests.integration.node_process import PARAMS, node_process, wait_healthy, write_chain

pytestmark = pytest.mark.slow

USERS = 6


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def workers_of(pid: int) -> list[int]:
    """The live ``mixnet.peel_worker`` children of process ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or int(fields[1]) != pid or fields[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"mixnet.peel_worker" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for a reaper does not)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for every process of ``pids`` to end; return those still alive."""
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_mixes_peel_in_workers_that_end_with_them(tmp_path: Path) -> None:
    chain, ports = write_chain(tmp_path, mixes=3, users=USERS)
    base = ["--chain", str(chain)]

    def mix(n: int, *extra: str) -> list[str]:
        return [*base, "--name", f"mix{n}", "--key", str(tmp_path / f"mix{n}.key"), *extra]

    values = [(i % 7) / 10 for i in range(USERS)]
    with (
        node_process([*base, "--name", "analyzer", "--peel-processes", "3"],
                     tmp_path / "analyzer.log") as analyzer,
        node_process(mix(3, "--peel-processes", "0"), tmp_path / "mix3.log") as mix3,
        node_process(mix(2, "--peel-processes", "3"), tmp_path / "mix2.log") as mix2,
        node_process(mix(1), tmp_path / "mix1.log") as entry,
    ):  # fmt: skip
        for port, proc in zip(ports, (entry, mix2, mix3, analyzer), strict=True):
            wait_healthy(port, proc)
        assert len(workers_of(entry.pid)) == (os.cpu_count() or 1)  # the default
        assert len(workers_of(mix2.pid)) == 3
        assert workers_of(mix3.pid) == []  # threads
        assert workers_of(analyzer.pid) == []  # the sink peels nothing
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/status", timeout=5) as r:
            shown = json.load(r)["peel_workers"]
        assert shown == {"pids": workers_of(mix2.pid), "replaced": 0}
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert 'mixnet_peel_workers{hop="1",node="mix2"} 3.0' in metrics
        assert "mixnet_peel_workers" not in urllib.request.urlopen(
            f"http://127.0.0.1:{ports[2]}/metrics", timeout=5
        ).read().decode()  # mix 3 peels in threads

        async def run() -> dict[str, object]:
            async with connect(chain, connections=2, retry_for=30.0) as net:
                receipts = await net.submit_many(values, concurrency=3)
                result = await net.result(receipts[0].round, timeout=60)
                return result.raw

        raw = asyncio.run(run())
        assert raw["status"] == "ok" and raw["users"] == USERS, raw
        k = PARAMS.precision
        assert Fraction(str(raw["estimate_exact"])) == Fraction(
            sum(quantize(v, k) for v in values), k
        )

        killed = workers_of(mix2.pid)
        mix2.send_signal(signal.SIGKILL)
        mix2.wait(timeout=10)
        assert wait_gone(killed, 10.0) == [], "a killed mix's workers outlived it"

        stopped = workers_of(entry.pid)
        entry.send_signal(signal.SIGTERM)
        assert entry.wait(timeout=30) == 0
        assert wait_gone(stopped, 10.0) == [], "a stopped mix's workers outlived it"
    log = (tmp_path / "mix1.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
