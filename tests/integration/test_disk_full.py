"""Fail-stop on a real full disk, end to end: the entry mix's database lives on a small
tmpfs; when a commit fails, ``cloaknet node`` exits with code 2 and a one-line error; its
database moved to a roomier disk and the node started again, the round ends with the exact
sum — nothing it acknowledged is lost, and the submission whose commit failed (stored or
not: its outcome is unknown) is counted once."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import connect
from cloaknet.encoding import quantize
from tests.integration.node_process import PARAMS, node_process, wait_healthy, write_chain
from tests.mixnet.small_disk import small_disk

#: Enough for the empty store and a few submissions, not for the round's 16.
DISK_KIB = 192


@pytest.mark.slow
def test_an_entry_mix_whose_disk_fills_exits_and_its_restart_counts_every_value_once(
    tmp_path: Path,
) -> None:
    users = 16
    chain, ports = write_chain(tmp_path, mixes=2, users=users)
    values = [(i % 11) / 10 for i in range(users)]
    base = ["--chain", str(chain)]
    mix1 = [*base, "--name", "mix1", "--key", str(tmp_path / "mix1.key")]
    with (
        small_disk(tmp_path, DISK_KIB) as disk,
        node_process([*base, "--name", "analyzer"], tmp_path / "analyzer.log") as analyzer,
        node_process([*base, "--name", "mix2", "--key", str(tmp_path / "mix2.key")],
                     tmp_path / "mix2.log") as mix2,
        node_process([*mix1, "--db", str(disk / "mix1.db")], tmp_path / "mix1.log") as entry,
    ):  # fmt: skip
        for port, proc in zip(ports, (entry, mix2, analyzer), strict=True):
            wait_healthy(port, proc)
        moved = tmp_path / "moved" / "mix1.db"

        async def run() -> dict[str, object]:
            async with connect(chain, connections=1, retry_for=120.0) as net:

                async def submit_all() -> list[int]:
                    return [(await net.submit(v)).round for v in values]

                sending = asyncio.create_task(submit_all())
                # the entry mix stops by itself once its disk is full
                code = await asyncio.to_thread(entry.wait, 60)
                log = (tmp_path / "mix1.log").read_text()
                assert code == 2, log[-2000:]
                assert "a commit failed" in log and "full" in log, log[-2000:]
                assert not sending.done()  # the client keeps resending its last submission
                # the operator moves the database (and its WAL) to a roomier disk
                moved.parent.mkdir()
                for suffix in ("", "-wal"):
                    source = disk / f"mix1.db{suffix}"
                    if source.exists():
                        shutil.copy2(source, moved.with_name(f"mix1.db{suffix}"))
                with node_process([*mix1, "--db", str(moved)], tmp_path / "mix1-2.log") as again:
                    await asyncio.to_thread(wait_healthy, ports[0], again)
                    rounds = await asyncio.wait_for(sending, 120)
                    assert len(set(rounds)) == 1
                    result = await net.result(rounds[0], timeout=120)
                    again.terminate()
                    assert again.wait(timeout=20) == 0
                return result.raw

        raw = asyncio.run(run())
    k = PARAMS.precision
    assert raw["users"] == users
    assert Fraction(str(raw["estimate_exact"])) == Fraction(
        sum(quantize(v, k) for v in values), k
    )


def test_small_disk_helper_unmounts(tmp_path: Path) -> None:
    with small_disk(tmp_path, 64) as disk:
        (disk / "x").write_bytes(b"1")
        assert subprocess.run(["mountpoint", "-q", str(disk)], check=False).returncode == 0
    assert not (disk / "x").exists()
