"""The entry mix's intake, measured in one process: event-loop CPU per submission.

A whole chain runs in this process (``mixnet.localchain``: real sockets, sqlite, crypto; the
mixes peel in worker processes unless ``--peel-processes 0``), with a round that stays open
(``min_users`` = ``max_users`` = users + 1). The users' submission boxes are wrapped first,
then handed to the entry mix's request path (``BaseNode._dispatch``, what a websocket
message reaches) as ``submit-many`` frames of ``--per-frame`` boxes, ``--connections`` of
them at a time, and every receipt is checked (all must be ``accepted``). Measured over that
intake only:

* ``loop_cpu_us_per_submission`` — CPU of this process's main thread (the event loop every
  node of the chain shares; only the entry mix works during intake) per submission: frame
  decoding, the round machine, the replay filter, the peel workers' pipes, the store's
  commit callbacks, the replies. The peel workers and the store's writer thread are other
  threads or processes and are not in it.
* ``wall_us_per_submission`` — wall time per submission.

Against ``scripts/bench_round.py`` (the whole round, every node its own process, the machine
shared with the load generator), this isolates the entry mix's event loop: runs in a row
spread by a few percent, so a change to the intake path shows in a few runs (sets taken
minutes apart on a shared machine differ more: alternate before and after). Prints a table
of the runs and their median; ``--json FILE`` writes the runs and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mixnet.client import MixnetClient
from mixnet.core.actions import DeliveredBatch
from mixnet.core.policy import RoundPolicy
from mixnet.frames import Submit
from mixnet.limits import DEFAULT_LIMITS
from mixnet.localchain import run_local_chain
from mixnet.settings import NodeSettings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore
from mixnet.submit_many import submit_many_frame
from mixnet.wire import encode_frame

#: Bytes of every payload (the round never reaches the sink: any width does).
PAYLOAD_LENGTH = 4


class BenchError(RuntimeError):
    """The entry mix refused a submission (the intake measured would not be the usual one)."""


class _Unused:
    """The sink's application: the round stays open, so nothing reaches it."""

    def analyze(self, round_id: int, batch: DeliveredBatch) -> Mapping[str, object]:
        return {"round": round_id, "status": "ok", "clients": batch.clients}

    def aborted(self, round_id: int) -> Mapping[str, object]:
        return {"round": round_id, "status": "aborted"}


def _sink(settings: NodeSettings, store: NodeStore) -> SinkNode:
    return SinkNode(settings, store, _Unused())


async def one_run(args: argparse.Namespace) -> dict[str, float]:
    """Wrap ``args.users`` submissions, feed them to a fresh chain's entry mix, and return
    the intake's ``loop_cpu_us_per_submission`` and ``wall_us_per_submission``.

    :raises BenchError: a submission was refused.
    """
    users, messages = args.users, args.messages
    policy = RoundPolicy(
        min_users=users + 1, max_users=users + 1, deadline_seconds=3600.0, chunk_size=1000
    )
    with tempfile.TemporaryDirectory(prefix="cloaknet-bench-entry-") as directory:
        async with run_local_chain(
            Path(directory),
            _sink,
            policy,
            messages=messages,
            payload_length=PAYLOAD_LENGTH,
            mixes=args.mixes,
            limits=DEFAULT_LIMITS,
            peel_processes=args.peel_processes,
        ) as chain:
            client = MixnetClient(
                chain.config,
                messages=messages,
                payload_length=PAYLOAD_LENGTH,
                sink_url=chain.config.sink.url,
            )
            async with client:
                info = await client.current_round()
                payloads = [bytes(PAYLOAD_LENGTH)] * messages
                boxes = [client.wrap(payloads, info) for _ in range(users)]
            subs = [Submit(info.round_id, f"user-{i:08d}", box) for i, box in enumerate(boxes)]
            per = args.per_frame
            frames = [
                encode_frame(submit_many_frame(subs[i : i + per])) for i in range(0, users, per)
            ]
            del boxes, subs
            entry = chain.mixes[0]
            connection = object()  # the connection guard counts nothing for an unknown one
            queue = list(reversed(frames))

            async def feed() -> None:
                while queue:
                    reply = await entry._dispatch(connection, queue.pop())  # type: ignore[arg-type]
                    results = reply.get("results")
                    if not isinstance(results, list):
                        raise BenchError(f"the entry mix refused a frame: {reply}")
                    refused = [r for r in results if r.get("type") != "accepted"]
                    if refused:
                        raise BenchError(f"the entry mix refused a submission: {refused[0]}")

            cpu, wall = time.thread_time(), time.perf_counter()
            await asyncio.gather(*(feed() for _ in range(args.connections)))
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {
        "loop_cpu_us_per_submission": cpu / users * 1e6,
        "wall_us_per_submission": wall / users * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20000, help="submissions per run (20000)")
    parser.add_argument("--messages", type=int, default=6, help="items per submission (6)")
    parser.add_argument("--mixes", type=int, default=3, help="mixes in the chain (3)")
    parser.add_argument("--per-frame", type=int, default=256,
                        help="submissions per submit-many frame (256, the chain's limit)")
    parser.add_argument("--connections", type=int, default=4,
                        help="frames in flight at once (4)")
    parser.add_argument("--peel-processes", type=int, default=2, metavar="N",
                        help="peel worker processes per mix (2; 0: threads of this process)")
    parser.add_argument("--runs", type=int, default=3, help="runs, each on a fresh chain (3)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    if args.users < 1 or args.messages < 1 or args.mixes < 2 or args.runs < 1:
        parser.error("--users, --messages and --runs must be >= 1, --mixes >= 2")
    if not 1 <= args.per_frame <= DEFAULT_LIMITS.max_submissions_per_frame:
        parser.error(f"--per-frame must be in 1..{DEFAULT_LIMITS.max_submissions_per_frame}")
    if args.connections < 1 or args.peel_processes < 0:
        parser.error("--connections must be >= 1 and --peel-processes >= 0")
    runs: list[dict[str, float]] = []
    try:
        for _ in range(args.runs):
            runs.append(asyncio.run(one_run(args)))
    except BenchError as exc:
        print(f"bench_entry: {exc}", file=sys.stderr)
        return 1
    keys = ("loop_cpu_us_per_submission", "wall_us_per_submission")
    median = {key: statistics.median(r[key] for r in runs) for key in keys}
    table = Table(title=f"entry mix intake: {args.users:,} submissions of {args.messages} items")
    table.add_column("run")
    table.add_column("event-loop CPU (µs / submission)", justify="right")
    table.add_column("wall (µs / submission)", justify="right")
    for number, run in enumerate(runs, 1):
        table.add_row(str(number), *(f"{run[key]:.1f}" for key in keys))
    table.add_row("median", *(f"{median[key]:.1f}" for key in keys))
    Console().print(table)
    if args.json is not None:
        record: dict[str, Any] = {
            "users": args.users,
            "messages": args.messages,
            "mixes": args.mixes,
            "per_frame": args.per_frame,
            "connections": args.connections,
            "peel_processes": args.peel_processes,
            "runs": runs,
            "median": median,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
