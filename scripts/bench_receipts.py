"""The entry mix's receipts across rounds: memory per receipt, ``dict`` against compact.

The entry mix keeps each stored submission's receipt (client id → 32-byte box digest) until
it opens the round 16 rounds later (``mixnet.core.entry_restore.RECEIPT_ROUNDS``), so it
holds the receipts of 16 rounds at once. While a round takes submissions they are a ``dict``
of ``str`` to ``bytes``; once it is confirmed (its intake dropped),
:class:`mixnet.core.receipts.ReceiptTable` moves them into a compact table. This builds
``--rounds`` rounds of ``--users`` receipts each way (client ids of ``--id-length``
characters, random digests) and reports, per receipt:

* ``live_bytes`` — memory held, by ``tracemalloc`` (NumPy's buffers included);
* ``rss_bytes`` — the resident memory the receipts added (``/proc/self/statm``), measured
  without ``tracemalloc`` (whose own records would count);
* ``compact_seconds`` — CPU of one round's :meth:`ReceiptTable.compacted` (what a worker
  thread of the entry mix does for a confirmed round), the median over the rounds.

Each measurement runs in a fresh process, so that memory one kind freed is not reused by
the other.

``--restart`` also writes the rounds into a node's store (``mixnet.store.NodeStore``, in a
temporary directory; one payload of 4 bytes per submission) and measures what reading them
back costs a restarted entry mix, as the peak resident memory above the process's start
(``VmHWM``), each in a fresh process: ``NodeStore.records()``, which compacts each finished
round as soon as its rows end, against reading every receipt into a ``dict`` per round
(what ``records()`` did before), ``restart_peak_bytes`` per receipt each.

Prints a table; ``--json FILE`` writes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mixnet.core.receipts import ReceiptTable


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _round(users: int, id_length: int, number: int) -> dict[str, bytes]:
    prefix = f"r{number}-"
    width = max(1, id_length - len(prefix))
    return {f"{prefix}{i:0{width}d}": os.urandom(32) for i in range(users)}


def measure(
    kind: str, rounds: int, users: int, id_length: int, trace: bool
) -> dict[str, float]:  # fmt: skip
    """Build ``rounds`` rounds of receipts as ``kind`` (``dict`` or ``compact``): the live
    bytes per receipt (``trace``) or the resident bytes and the compaction's CPU."""
    keep: list[Any] = []
    timings: list[float] = []
    build: Callable[[dict[str, bytes]], Any]
    if kind == "dict":
        build = dict
    else:

        def build(receipts: dict[str, bytes]) -> ReceiptTable:
            table = ReceiptTable(receipts.items())
            start = time.process_time()
            compact = table.compacted()
            timings.append(time.process_time() - start)
            table.adopt(compact)
            return table

    gc.collect()
    rss_before = _rss()
    if trace:
        tracemalloc.start()
    for number in range(rounds):
        keep.append(build(_round(users, id_length, number)))
        gc.collect()
    receipts = rounds * users
    if trace:
        live = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return {"live_bytes": live / receipts}
    return {
        "rss_bytes": (_rss() - rss_before) / receipts,
        "compact_seconds": statistics.median(timings) if timings else 0.0,
    }


def _in_child(kind: str, rounds: int, users: int, id_length: int) -> dict[str, float]:
    """:func:`measure` both ways, each in a fresh process."""
    context = multiprocessing.get_context("spawn")
    result: dict[str, float] = {}
    with context.Pool(1, maxtasksperchild=1) as pool:
        for trace in (False, True):
            result.update(pool.apply(measure, (kind, rounds, users, id_length, trace)))
    return result


def _peak() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _write_store(path: Path, rounds: int, users: int, id_length: int) -> None:
    """``rounds`` confirmed rounds of ``users`` stored submissions each (their receipts)."""
    from mixnet.core.records import AddSubmission, DropIntake, NewRound, Submission
    from mixnet.core.status import RoundStatus
    from mixnet.store import NodeStore

    with NodeStore(path) as store:
        for number in range(rounds):
            r = number + 1
            store.apply([[NewRound(r, RoundStatus.CONFIRMED, 0.0)]])
            receipts = _round(users, id_length, number)
            writes = [AddSubmission(r, Submission(client, digest, (b"\0" * 4,)))
                      for client, digest in receipts.items()]  # fmt: skip
            for start in range(0, len(writes), 5000):
                errors = store.apply([[w] for w in writes[start : start + 5000]])
                if any(errors):
                    raise RuntimeError(f"the store refused a write: {errors}")
            store.apply([[DropIntake(r)]])  # confirmed: the intake goes, the receipts stay


def restart_peak(path: str, how: str) -> float:
    """Peak resident bytes above this fresh process's start while it reads the store's
    receipts ``how``: ``records`` (``NodeStore.records()``) or ``dicts``."""
    import sqlite3

    from mixnet.store import NodeStore

    gc.collect()
    before = _rss()
    if how == "records":
        with NodeStore(path) as store:
            kept: object = store.records().receipts
    else:
        connection = sqlite3.connect(path)
        receipts: dict[int, dict[str, bytes]] = {}
        for r, client, digest in connection.execute(
            "SELECT round_id, client, digest FROM receipts ORDER BY round_id, rowid"
        ):
            receipts.setdefault(r, {})[client] = digest
        connection.close()
        kept = receipts
    del kept
    return float(_peak() - before)


def _restart(rounds: int, users: int, id_length: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "node.db"
        _write_store(path, rounds, users, id_length)
        result = {}
        for how in ("dicts", "records"):
            with context.Pool(1, maxtasksperchild=1) as pool:
                result[how] = pool.apply(restart_peak, (str(path), how)) / (rounds * users)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000, help="receipts per round (100000)")
    parser.add_argument("--rounds", type=int, default=16,
                        help="rounds kept at once (16, as the entry mix keeps them)")  # fmt: skip
    parser.add_argument("--id-length", type=int, default=36,
                        help="characters per client id (36, a UUID's)")  # fmt: skip
    parser.add_argument("--restart", action="store_true",
                        help="also measure reading them back from a node's store")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    if args.users < 1 or args.rounds < 1 or not 8 <= args.id_length <= 256:
        parser.error("--users and --rounds must be >= 1, --id-length in 8..256")
    results = {kind: _in_child(kind, args.rounds, args.users, args.id_length)
               for kind in ("dict", "compact")}  # fmt: skip
    table = Table(title=f"receipts: {args.rounds} rounds of {args.users:,} users")
    for column in ("kept as", "live bytes / receipt", "RSS bytes / receipt",
                   "compacting a round (CPU s)"):  # fmt: skip
        table.add_column(column, justify="right")
    for kind, row in results.items():
        compact = f"{row['compact_seconds']:.3f}" if kind == "compact" else "—"
        table.add_row(kind, f"{row['live_bytes']:.0f}", f"{row['rss_bytes']:.0f}", compact)
    Console().print(table)
    restart = None
    if args.restart:
        restart = _restart(args.rounds, args.users, args.id_length)
        Console().print(
            "restart, peak RSS per receipt while reading them back: "
            f"dict per round {restart['dicts']:.0f} B, NodeStore.records() "
            f"{restart['records']:.0f} B"
        )
    if args.json is not None:
        record = {"users": args.users, "rounds": args.rounds, "id_length": args.id_length,
                  "results": results, "restart_peak_bytes": restart}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
