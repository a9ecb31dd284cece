"""``cloaknet demo`` (``--mixes`` >= 1, the default): the system as separate OS processes.

Chooses the parameters exactly as ``cloaknet plan`` does (:func:`cloaknet.demo_plan.choose`:
by default :func:`cloaknet.plans.select_plan` with ``bound="auto"``), writes identity keys
and a chain file into a temporary directory, starts
every mix and the analyzer as ``python -m cloaknet node ...`` processes on 127.0.0.1 ports
picked at start, waits for ``/healthz``, runs the users as concurrent clients of the
websocket client library, follows the round through every hop, prints the result (naming
the bound and the noise), and stops every process it started — also on Ctrl-C and on
failure. ``--protocol`` picks the cloak or a comparison protocol instead of the plan;
``--mixes 0`` runs :mod:`cloaknet.demo` instead.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from cloaknet.chain_init import local_chain
from cloaknet.chainfile import load_chain, write_chain_file
from cloaknet.client import connect
from cloaknet.demo_plan import choose, summary_rows
from cloaknet.encoding import quantize
from cloaknet.process_chain import sigterm_interrupts, stop_processes
from cloaknet.wire_cost import wire_cost
from mixnet.chain import RoundPolicy

__all__ = ["DemoError", "run_network_demo"]

HOST = "127.0.0.1"


class DemoError(RuntimeError):
    """A node failed to start or the round did not finish."""


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
        return json.loads(response.read())


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


class _Processes:
    """The node processes the demo started; :meth:`stop_all` ends every one of them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str]) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "cloaknet", "node", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.directory / f"{name}.log").read_text(errors="replace")[-2000:]
                raise DemoError(f"node {name} exited with {proc.returncode}:\n{tail}")

    def stop_all(self) -> None:
        stop_processes(self.procs.values(), 10.0)


def run_network_demo(
    *,
    users: int,
    mixes: int,
    epsilon: float,
    delta: float,
    precision: int | None,
    mode: str,
    data_seed: int | None,
    as_json: bool,
    keep: bool = False,
    concurrency: int = 32,
    protocol: str = "plan",
    bound: str = "auto",
) -> int:
    """Run the multi-process demo; prints a table or one JSON object; returns 0.

    ``protocol`` and ``bound`` choose what the chain carries (:func:`cloaknet.demo_plan.choose`;
    by default the plan ``cloaknet plan`` prints for these arguments). The JSON object has
    the plan's summary (``protocol``, ``bound``, ``lemma``, ``noise``,
    ``messages_per_user``, ``epsilon``, ``epsilon_exact``, ``delta``, …), the wire bytes
    per user (``wire_bytes_per_user``, ``wire_bytes_per_hop``: :mod:`cloaknet.wire_cost`)
    and what the run measured.
    """
    started = time.perf_counter()
    choice = choose(protocol, users, epsilon, delta, mode=mode, bound=bound, precision=precision)
    chosen = choice.cloak_plan
    table = choice.chain_table(precision)
    values = np.random.default_rng(data_seed).random(users)
    directory = Path(tempfile.mkdtemp(prefix="cloaknet-demo-"))
    procs = _Processes(directory)
    console = Console(stderr=True)
    with sigterm_interrupts():  # kill or a CI timeout: the nodes are stopped too
        try:
            policy = RoundPolicy(
                min_users=users, max_users=users, deadline_seconds=3600.0, below_min="wait"
            )
            local = local_chain(directory, chain_id="demo", mixes=mixes, policy=policy, host=HOST)
            config, names, ports = local.config, local.names, local.ports
            chain_path = directory / "chain.toml"
            write_chain_file(chain_path, config, table, chosen)
            loaded = load_chain(chain_path)
            cost = wire_cost(loaded.messages, loaded.payload_length, mixes,
                             proven=config.ownership_proofs)  # fmt: skip
            base = ["--chain", str(chain_path)]
            procs.start("analyzer", [*base, "--name", "analyzer"])
            for name in reversed(names):
                procs.start(name, [*base, "--name", name, "--key", str(directory / f"{name}.key")])
            limit = time.monotonic() + 30
            while not all(_healthy(p) for p in ports):
                procs.check_alive()
                if time.monotonic() > limit:
                    raise DemoError("nodes did not report /healthz within 30 s")
                time.sleep(0.05)
            outcome = asyncio.run(
                _drive(
                    chain_path,
                    values.tolist(),
                    ports,
                    names,
                    console,
                    quiet=as_json,
                    concurrency=concurrency,
                    procs=procs,
                )
            )
        except KeyboardInterrupt:
            console.print("interrupted: stopping every node")
            raise
        finally:
            procs.stop_all()
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
    seconds = time.perf_counter() - started
    result = outcome["result"]
    true_sum = float(np.sum(values))
    summary: dict[str, Any] = {
        "users": users,
        "mixes": mixes,
        **choice.summary,
        "round": outcome["round"],
        "true_sum": true_sum,
        "estimate": result["estimate"],
        "error": result["estimate"] - true_sum,
        "seconds": seconds,
        "submit_seconds": outcome["submit_seconds"],
        "hop_messages_per_second": outcome["hop_rates"],
        "hop_seconds": outcome["hop_seconds"],
        **cost.to_json(),
        "directory": str(directory) if keep else None,
    }
    if chosen is not None:
        params = chosen.params
        rounded = Fraction(
            sum(quantize(float(v), params.precision) for v in values), params.precision
        )
        summary.update(
            {
                "rounded_sum": float(rounded),
                "rounded_sum_exact": f"{rounded.numerator}/{rounded.denominator}",
                "estimate_exact": result["estimate_exact"],
            }
        )
    else:
        summary.update(
            {
                "rounded_sum": None,  # these protocols round randomly: no fixed rounded sum
                "expected_estimate": choice.protocol.expected_estimate(values),
                "expected_rmse": choice.protocol.predicted_rmse_for(values),
            }
        )
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary)
    return 0


async def _drive(
    chain_path: Path,
    values: list[float],
    ports: list[int],
    names: list[str],
    console: Console,
    *,
    quiet: bool,
    concurrency: int,
    procs: _Processes,
) -> dict[str, Any]:
    hops = [*names, "analyzer"]
    with Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    ) as bars:
        submit_task = bars.add_task("submitting", total=len(values))
        hop_tasks: dict[str, TaskID] = {hop: bars.add_task(f"hop {hop}", total=1) for hop in hops}
        t0 = time.perf_counter()
        async with connect(chain_path, connections=8) as net:
            receipts = await net.submit_many(
                values,
                concurrency=concurrency,
                progress=lambda k: bars.advance(submit_task, k),
            )
            submit_seconds = time.perf_counter() - t0
            rounds = sorted({r.round for r in receipts})
            if len(rounds) != 1:
                raise DemoError(f"users landed in several rounds: {rounds}")
            round_id = rounds[0]
            result_task = asyncio.create_task(net.result(round_id))
            while not result_task.done():
                procs.check_alive()
                statuses = await asyncio.to_thread(_statuses, ports)
                for hop, status in zip(hops, statuses, strict=True):
                    info = _round_info(status, round_id)
                    done = info.get("status") in ("forwarded", "done")
                    bars.update(hop_tasks[hop], completed=1 if done else 0)
                await asyncio.wait({result_task}, timeout=0.2)
            result = await result_task
        statuses = await asyncio.to_thread(_statuses, ports)
        for hop in hops:
            bars.update(hop_tasks[hop], completed=1)
    rates: list[float] = []
    seconds: list[float] = []
    for status in statuses:
        info = _round_info(status, round_id)
        busy = sum(
            float(info.get(key, 0.0))
            for key in ("peel_seconds", "mix_seconds", "forward_seconds", "analyze_seconds")
        )
        messages = float(info.get("messages", 0))
        seconds.append(busy)
        rates.append(messages / busy if busy > 0 else 0.0)
    return {
        "round": round_id,
        "result": result.raw,
        "submit_seconds": submit_seconds,
        "hop_rates": rates,
        "hop_seconds": seconds,
    }


def _round_info(status: dict[str, Any], round_id: int) -> dict[str, Any]:
    """One round's entry in a node's ``/status`` (``{}`` if the node does not list it)."""
    for info in status.get("rounds", []):
        if isinstance(info, dict) and info.get("round") == round_id:
            return info
    return {}


def _statuses(ports: list[int]) -> list[dict[str, Any]]:
    out = []
    for port in ports:
        try:
            out.append(_get_json(f"http://{HOST}:{port}/status"))
        except (OSError, ValueError):
            out.append({})
    return out


def _print_table(summary: dict[str, Any]) -> None:
    table = Table(
        title=f"cloaknet demo — {summary['users']:,} users, {summary['mixes']} mixes, "
        f"{summary['protocol']}, {summary['mode']}"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for quantity, value in summary_rows(summary):
        table.add_row(quantity, value)
    hops = ", ".join(f"{n} {b:,}" for n, b in summary["wire_bytes_per_hop"].items())
    table.add_row("wire bytes per user", f"{summary['wire_bytes_per_user']:,}  ({hops})")
    table.add_row("submit time", f"{summary['submit_seconds']:.2f} s")
    for i, (rate, secs) in enumerate(
        zip(summary["hop_messages_per_second"], summary["hop_seconds"], strict=True)
    ):
        label = f"mix{i + 1}" if i < summary["mixes"] else "analyzer"
        table.add_row(f"{label}: messages/s", f"{rate:,.0f}  ({secs:.2f} s)")
    table.add_row("wall time", f"{summary['seconds']:.2f} s")
    Console().print(table)
