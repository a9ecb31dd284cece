"""A later mix whose disk fills up in the middle of a round, end to end.

Mix 2 (of three) keeps its database on a small tmpfs that the test fills, once round 1 is
open, up to a few KiB: enough to open the next round, not to store round 1's chunk. Mix 2
answers that chunk with an error — ``internal-error`` (nothing stored), or, when its
``COMMIT`` failed, ``the node stopped`` before it exits (fail-stop). Once space is freed it
is started again if it stopped, as an init system would, from the same database. The entry
mix must send the chunk again, and round 1 must end with the exact sum of every value.
Before chunks were sent again after an error answer, the round stayed where it was until the
entry mix itself restarted."""

from __future__ import annotations

import asyncio
import errno
import time
from fractions import Fraction
from pathlib import Path

import pytest

from cloaknet.client import connect
from cloaknet.encoding import quantize
from tests.integration.node_process import PARAMS, node_process, wait_healthy, write_chain
from tests.mixnet.small_disk import small_disk

USERS = 20
#: Bytes left free on mix 2's disk: room for opening the next round (two one-page commits to
#: its write-ahead log), none for round 1's chunk (its items as received and peeled, about
#: 20 KiB), so that the chunk's write is the one that fails, in whichever order they come.
LEAVE = 16 * 1024
#: What mix 2 logs when it could not store a chunk (nothing stored, or a failed commit).
FAILURES = ("nothing stored", "a commit failed")


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with one file, leaving ``leave`` bytes free; return the file's path."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        out.truncate(max(0, out.tell() - leave))
    return filler


@pytest.mark.slow
def test_a_later_mix_whose_disk_fills_gets_the_chunk_again(tmp_path: Path) -> None:
    chain, ports = write_chain(tmp_path, mixes=3, users=USERS)
    values = [(i % 9) / 10 for i in range(USERS)]
    base = ["--chain", str(chain)]
    mix2_log = tmp_path / "mix2.log"
    with small_disk(tmp_path, 1024) as disk:
        mix2_args = [*base, "--name", "mix2", "--key", str(tmp_path / "mix2.key"),
                     "--db", str(disk / "mix2.db")]  # fmt: skip
        with (
            node_process([*base, "--name", "analyzer"], tmp_path / "analyzer.log") as analyzer,
            node_process([*base, "--name", "mix3", "--key", str(tmp_path / "mix3.key")],
                         tmp_path / "mix3.log") as mix3,
            node_process(mix2_args, mix2_log) as mix2,
            node_process([*base, "--name", "mix1", "--key", str(tmp_path / "mix1.key")],
                         tmp_path / "mix1.log") as entry,
        ):  # fmt: skip
            for port, proc in zip(ports, (entry, mix2, mix3, analyzer), strict=True):
                wait_healthy(port, proc)

            def failed() -> bool:
                log = mix2_log.read_text(errors="replace")
                return mix2.poll() is not None or any(word in log for word in FAILURES)

            async def run() -> dict[str, object]:
                async with connect(chain, connections=2, retry_for=60.0) as net:
                    info = await net.mixnet.current_round(refresh=True)
                    filler = await asyncio.to_thread(fill, disk, LEAVE)
                    receipts = await net.submit_many(values, concurrency=4)
                    assert {r.round for r in receipts} == {info.round_id}
                    limit = time.monotonic() + 60
                    while not await asyncio.to_thread(failed):
                        assert time.monotonic() < limit, "mix 2 never ran out of space"
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(1.5)  # refused (or unreachable) meanwhile
                    filler.unlink()
                    if mix2.poll() is None:
                        result = await net.result(info.round_id, timeout=60)
                        return result.raw
                    assert mix2.returncode == 2, mix2_log.read_text()[-2000:]
                    with node_process(mix2_args, mix2_log) as again:  # as init would
                        await asyncio.to_thread(wait_healthy, ports[1], again)
                        result = await net.result(info.round_id, timeout=60)
                    return result.raw

            raw = asyncio.run(run())
    log = mix2_log.read_text(errors="replace")
    assert any(word in log for word in FAILURES), log[-2000:]
    assert raw["status"] == "ok", raw
    assert raw["users"] == USERS
    k = PARAMS.precision
    assert Fraction(str(raw["estimate_exact"])) == Fraction(
        sum(quantize(v, k) for v in values), k
    )
