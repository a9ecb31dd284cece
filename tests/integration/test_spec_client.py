"""End-to-end test of the spec-only client (``spec_client.py``) against a real chain.

The chain is made and run with the ``cloaknet`` command line only (``chain init`` and one
``node`` process per node, on 127.0.0.1 ports that ``chain init`` chose); the client side is
``spec_client``, written from ``docs/wire.md`` alone. Nothing from ``cloaknet`` or ``mixnet``
is imported here.
"""

from __future__ import annotations

import asyncio
import math
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.integration import spec_client

CLOAKNET = Path(sys.executable).parent / "cloaknet"
VALUES = [0.42, 0.3, 1.0, 0.0, 0.999]  # 0.3·50 is 14.999… exactly: floor 14, not 15


def _healthz(url: str) -> bool:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    try:
        with urllib.request.urlopen(
            f"http://{parts.hostname}:{parts.port}/healthz", timeout=1
        ) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def chain_file(tmp_path: Path) -> Iterator[Path]:
    """A 3-mix sum-preserving chain for rounds of exactly 5 users, all nodes running."""
    directory = tmp_path / "chain"
    subprocess.run(
        [str(CLOAKNET), "chain", "init", str(directory), "--mixes", "3", "--users", "5",
         "--epsilon", "1", "--delta", "1e-6", "--mode", "sum-preserving",
         "--bound", "optimized"],
        check=True, capture_output=True, timeout=60,
    )
    path = directory / "chain.toml"
    with path.open("rb") as fh:
        doc = tomllib.load(fh)
    protocol = doc["protocol"]
    # The client needs the explicit form (docs/wire.md § 11.1); chain init writes it.
    assert {"mode", "messages", "modulus", "precision"} <= protocol.keys(), protocol
    assert protocol["mode"] == "sum-preserving"
    urls = [m["url"] for m in doc["mix"]] + [doc["analyzer"]["url"]]
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in urls)

    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        nodes = [("analyzer", None)] + [(m["name"], directory / f"{m['name']}.key")
                                        for m in reversed(doc["mix"])]
        for name, key in nodes:
            args = [str(CLOAKNET), "node", "--chain", str(path), "--name", name]
            if key is not None:
                args += ["--key", str(key)]
            log = (directory / f"{name}.log").open("wb")
            logs.append(log)
            procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=directory))
        deadline = time.monotonic() + 30
        pending = list(urls)
        while pending:
            for proc in procs:
                if proc.poll() is not None:
                    text = "\n".join(p.read_text() for p in directory.glob("*.log"))
                    pytest.fail(f"a node exited with {proc.returncode}:\n{text}")
            pending = [u for u in pending if not _healthz(u)]
            if pending and time.monotonic() > deadline:
                pytest.fail(f"nodes not healthy: {pending}")
            time.sleep(0.1)
        yield path
    finally:
        _stop(procs)
        for log in logs:
            log.close()


def test_vectors() -> None:
    assert spec_client.check_vectors() == [
        "chain", "binding_data", "announcements", "link_authentication", "submissions",
        "one_mix", "wrong_binding", "trace", "admission", "cloaknet", "result", "frames",
    ]


def test_spec_client_exact_sum(chain_file: Path) -> None:
    spec_client.check_vectors()
    chain = spec_client.load_chain(chain_file)
    k, modulus = chain.protocol.precision, chain.protocol.modulus

    async def run() -> spec_client.Outcome:
        return await asyncio.wait_for(
            spec_client.submit_and_sum(chain_file, VALUES, drop_first_reply=True,
                                       resend_first=True),
            timeout=180,
        )

    outcome = asyncio.run(run())

    # The first submit went through a dropped connection and an identical resend.
    assert outcome.resends >= 1
    assert len(outcome.receipts) == len(VALUES)
    assert len(outcome.results) == 1, outcome.results  # max_users = 5: one round
    (result,) = outcome.results.values()
    assert result.status == "ok", result.raw
    assert result.users == len(VALUES)  # nothing counted twice, nothing lost
    assert result.excluded == 0
    assert result.raw["messages"] == len(VALUES) * chain.protocol.messages

    quantized = [math.floor(Fraction(x) * k) for x in VALUES]
    expected = sum((Fraction(q, k) for q in quantized), Fraction(0))
    assert result.estimate_exact == expected
    assert outcome.estimate_exact == expected
    assert result.raw_sum == sum(quantized) % modulus
    assert result.raw["precision"] == k
    assert result.raw["clamped"] is None
