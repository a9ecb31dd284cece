"""End-to-end test of the spec-only client (``spec_client.py``) against a real chain.

The chain is made and run with the ``cloaknet`` command line only (``chain init`` and one
``node`` process per node, on 127.0.0.1 ports that ``chain init`` chose); the client side is
``spec_client``, written from ``docs/wire.md`` alone. Nothing from ``cloaknet`` or ``mixnet``
is imported here. The second chain is the same with ``[chain] ownership_proofs = true``
written into its chain file (docs/wire.md § 2, § 9.5): the spec client wraps every inner
layer with its ownership proof, and two submissions that hide garbage layers are traced and
excluded by the nodes (§ 13.3).
"""

from __future__ import annotations

import asyncio
import json
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


def _run_chain(tmp_path: Path, *, max_users: int = 5, proven: bool = False) -> Iterator[Path]:
    """A 3-mix sum-preserving chain planned for 5 users (rounds of 5 to ``max_users``), all
    nodes running; ``proven``: with ``[chain] ownership_proofs = true``."""
    directory = tmp_path / "chain"
    subprocess.run(
        [str(CLOAKNET), "chain", "init", str(directory), "--mixes", "3", "--users", "5",
         "--max-users", str(max_users), "--epsilon", "1", "--delta", "1e-6",
         "--mode", "sum-preserving", "--bound", "optimized"],
        check=True, capture_output=True, timeout=60,
    )
    path = directory / "chain.toml"
    if proven:  # docs/wire.md § 2: the optional key of the [chain] table
        text = path.read_text(encoding="utf-8")
        assert text.count("[chain]\n") == 1
        path.write_text(text.replace("[chain]\n", "[chain]\nownership_proofs = true\n"),
                        encoding="utf-8")
    with path.open("rb") as fh:
        doc = tomllib.load(fh)
    assert doc["chain"].get("ownership_proofs", False) is proven
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


@pytest.fixture
def chain_file(tmp_path: Path) -> Iterator[Path]:
    """A 3-mix sum-preserving chain for rounds of exactly 5 users, all nodes running."""
    yield from _run_chain(tmp_path)


@pytest.fixture
def proven_chain_file(tmp_path: Path) -> Iterator[Path]:
    """The same with ownership proofs, for rounds of 5 to 7 users."""
    yield from _run_chain(tmp_path, max_users=7, proven=True)


def _status(url: str) -> dict[str, object]:
    """A node's ``GET /status`` (JSON, informational: docs/wire.md § 3)."""
    parts = urlsplit(url)
    with urllib.request.urlopen(
        f"http://{parts.hostname}:{parts.port}/status", timeout=5
    ) as reply:
        status = json.loads(reply.read())
    assert isinstance(status, dict)
    return status


def _dropped(status: dict[str, object], round_id: int) -> int:
    rounds = status.get("rounds")
    assert isinstance(rounds, list)
    (entry,) = [r for r in rounds if r.get("round") == round_id]
    return int(entry.get("dropped", 0))


def test_vectors() -> None:
    assert spec_client.check_vectors() == [
        "chain", "binding_data", "announcements", "link_authentication", "submissions",
        "one_mix", "wrong_binding", "trace", "admission", "cloaknet", "result", "frames",
        "proven",
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


def test_spec_client_submits_many_in_one_frame(chain_file: Path) -> None:
    """docs/wire.md § 6.1 ``submit-many`` from the spec alone: five users and a box one byte
    short in one frame; the short one is refused ``bad-length``, the five are counted once
    each (also after an identical resend of one of them)."""
    chain = spec_client.load_chain(chain_file)
    k = chain.protocol.precision

    async def run() -> spec_client.Outcome:
        return await asyncio.wait_for(
            spec_client.submit_and_sum(chain_file, VALUES, many=True, resend_first=True),
            timeout=180,
        )

    outcome = asyncio.run(run())
    (result,) = outcome.results.values()
    assert result.status == "ok", result.raw
    assert result.users == len(VALUES)
    expected = sum((Fraction(math.floor(Fraction(x) * k), k) for x in VALUES), Fraction(0))
    assert result.estimate_exact == expected


def test_spec_client_on_a_chain_with_ownership_proofs(proven_chain_file: Path) -> None:
    """docs/wire.md § 9.5, § 9.6, § 13.3 against real nodes: a box of the length without
    proofs is refused (`bad-length`); five honest values wrapped with ownership proofs and two
    garbage submissions (random bytes at hop 1: ``no-owner``; a valid ownership proof over
    random ciphertext at hop 2: ``undecryptable``) make one round whose garbage is traced and
    excluded, with the exact sum of the honest values."""
    chain = spec_client.load_chain(proven_chain_file)
    assert chain.ownership_proofs
    w, hops, m = chain.protocol.payload_length, chain.hops, chain.protocol.messages
    assert chain.submission_length == 48 + m * (w + 96 * (hops - 1))
    k = chain.protocol.precision

    async def refused_without_proofs() -> str:
        async with spec_client.Link(chain.mixes[0].url) as entry:
            offer = await spec_client.get_round(chain, entry)
            payloads = spec_client.encode_value(0.5, chain.protocol)
            box = spec_client.wrap_submission(payloads, chain.chain_id, offer.round_id,
                                              offer.keys).box
            assert len(box) == spec_client.submission_length(w, hops, m) < chain.submission_length
            frame = spec_client.encode_frame("submit", round=offer.round_id, client="unproven",
                                             box=box)
            reply = await entry.request(frame)
        assert reply["type"] == "error", reply
        return str(reply["code"])

    async def run() -> spec_client.Outcome:
        return await spec_client.submit_and_sum(proven_chain_file, VALUES,
                                                garbage=[(1, False), (2, True)])

    assert asyncio.run(asyncio.wait_for(refused_without_proofs(), timeout=60)) == "bad-length"
    outcome = asyncio.run(asyncio.wait_for(run(), timeout=180))

    assert len(outcome.garbage) == 2 and len(outcome.receipts) == len(VALUES)
    assert len(outcome.results) == 1, outcome.results  # max_users = 7: one round
    ((round_id, result),) = outcome.results.items()
    assert result.status == "ok", result.raw
    assert result.excluded == 2  # both garbage submissions traced and excluded
    assert result.users == len(VALUES)
    assert result.raw["messages"] == len(VALUES) * m
    quantized = [math.floor(Fraction(x) * k) for x in VALUES]
    assert result.estimate_exact == sum((Fraction(q, k) for q in quantized), Fraction(0))
    # where each garbage item surfaced: one at mix2 (hop 1), one at mix3 (hop 2)
    dropped = [_dropped(_status(mix.url), round_id) for mix in chain.mixes]
    assert dropped == [0, 1, 1]
