#!/usr/bin/env python3
"""Benchmark: one full round of N users through a real local chain of node processes.

Chooses the protocol as ``cloaknet demo`` does (:func:`cloaknet.demo_plan.choose`; default
``plan``, what ``cloaknet plan`` selects), writes keys and a chain file into a temporary
directory the way ``cloaknet demo`` does (rounds of exactly N users), starts every mix and the
analyzer as ``python -m cloaknet node`` processes on 127.0.0.1, pre-wraps every user's
submission on every core (:class:`cloaknet.loadgen.LoadGenerator`), sends them to the entry
mix over several connections (``--per-frame`` users' boxes per ``submit-many`` frame, or one
``submit`` frame per user with ``--per-frame 1``), waits for the analyzer's result and for
every node to finish the round, and stops every process it started (also on failure or Ctrl-C).

It reports, and writes as JSON (``--json FILE``):

* ``wall_seconds`` — first submission sent → the analyzer's result received;
* ``cpu_seconds`` — user + system CPU of all node processes over the round (``/proc``),
  a mix's peel worker processes included (``cloaknet node --peel-processes``, default one
  per core), from just before the first submission until every node has finished the
  round; the load generator's CPU is reported separately (``loadgen``);
* ``x25519_per_share`` — X25519 scalar multiplications per share over all parties, counted
  from the onion format (version 2, :mod:`mixnet.onion`): a client seals each share once
  per mix after the first and the submission's ``m`` inner onions once together for the
  entry mix (an ephemeral key pair and one Diffie–Hellman: 2 scalar multiplications per
  layer sealed); the entry mix opens one box per submission (1), every later mix one layer
  per share (1); so ``3·(L − 1) + 3/m`` for L mixes (format v1, one sealed box per share
  and mix: 3·L, in ``x25519_per_share_v1``);
* ``crypto_floor_cpu_seconds`` — the round's seals and opens priced at the single-core CPU
  cost per layer of the format's primitives called through PyNaCl's bindings (X25519 key
  pair and ``crypto_scalarmult``, the BLAKE2b key derivation, ChaCha20-Poly1305-IETF on each hop's
  layer size: the box at the entry mix, an onion at every later mix), measured in the same
  run before and again after the round, each cost the mean of the two (a shared machine's
  speed drifts by several percent over a minute: ``crypto_rates_before`` and
  ``crypto_rates_after`` show by how much); ``cpu_over_floor`` — the nodes' CPU over the
  nodes' part (the opens);
* ``cpu_over_floor_direct`` — the same over the opens priced at libsodium's functions called
  directly through CFFI into buffers allocated once, as the peel workers call them
  (``crypto_floor_nodes_direct_cpu_seconds``, per hop ``open_direct_cpu_seconds``): PyNaCl's
  wrappers allocate and check on every call, which makes the floor above a few µs per layer
  (12–14% on this machine) dearer than the primitives need, so this ratio is the stricter;
* per node: ``cpu_seconds`` and of it ``system_cpu_seconds`` (kernel time: sockets, ``fsync``,
  thread wake-ups), ``peak_rss_bytes`` (``VmHWM``, reset through ``clear_refs`` after the idle
  reading where the kernel allows it), ``idle_rss_bytes`` (``VmRSS`` before the round), each
  summed over the node's process and its peel workers,
  ``items_in`` and ``item_length`` (submission boxes at the entry mix, onions at later
  mixes, payloads at the analyzer), ``ciphertext_bytes_in`` (items × item length) and
  ``rss_over_ciphertext`` ((peak − idle) / ciphertext bytes in);
* ``wire_bytes_per_user`` — the bytes one user's submission puts on the wire into each node:
  its box into the entry mix, its ``m`` onions into each later mix, its ``m`` payloads into
  the analyzer.

Linux only (``/proc``). Usage::

    .venv/bin/python scripts/bench_round.py --users 10000 [--protocol plan] [--mixes 3]
        [--mode single-user|sum-preserving] [--json bench-results/round.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from nacl import bindings
from nacl._sodium import ffi as sodium_ffi  # libsodium through CFFI, without PyNaCl's wrappers
from nacl._sodium import lib as sodium_lib
from rich.console import Console
from rich.table import Table

from cloaknet.chain_init import local_chain
from cloaknet.chainfile import load_chain, write_chain_file
from cloaknet.client import connect
from cloaknet.demo_plan import DEMO_PROTOCOLS, choose
from cloaknet.encoding import quantize
from cloaknet.errors import CloakError
from cloaknet.loadgen import LoadGenerator
from cloaknet.process_chain import sigterm_interrupts, stop_processes
from mixnet.chain import RoundPolicy
from mixnet.onion import (
    AEAD_TAG_LENGTH,
    KDF_PERSONAL,
    PUBLIC_KEY_LENGTH,
    binding_data,
    onion_length,
    seal_layer,
    submission_length,
)

HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Statuses a node's round ends in (mixnet.core.status.TERMINAL).
TERMINAL = frozenset({"confirmed", "done", "aborted", "failed"})
COUNTING_RULE = (
    "onion format v2, per submission of m shares: the client seals m(L-1) inner layers and "
    "one box for the entry mix, each an ephemeral X25519 key pair (1 scalar multiplication) "
    "and one Diffie-Hellman (1); the entry mix opens the box with one Diffie-Hellman (1), "
    "every later mix one layer per share (1); the analyzer does none: 3(m(L-1) + 1) per "
    "submission, 3(L-1) + 3/m per share, for L mixes (v1, a sealed box per share and mix: 3L)"
)


class BenchError(RuntimeError):
    """A node failed or the round did not finish."""


# --------------------------------------------------------------------------- /proc


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 first)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def family(pid: int) -> list[int]:
    """``pid`` and its live child processes (a mix's peel workers), from each of its
    threads' ``/proc/<pid>/task/<tid>/children`` (a read per thread, which the sampler can
    afford ten times a second; every process's ``stat`` only where the kernel lacks them)."""
    lists = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if not lists:  # a kernel without CONFIG_PROC_CHILDREN: ask every process for its parent
        children = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    if int(_stat(int(entry.name))[1]) == pid:
                        children.append(int(entry.name))
        return [pid, *sorted(children)]
    found: set[int] = set()
    for listing in lists:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found.update(int(child) for child in listing.read_text().split())
    return [pid, *sorted(found)]


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid``: all its threads, its live children
    (a mix's peel worker processes) and the children it has reaped, from /proc."""
    user = system = 0.0
    for member in family(pid):
        try:
            fields = _stat(member)
        except OSError:  # a child that exited meanwhile: reaped, it is in cutime below
            continue
        user += int(fields[11]) + int(fields[13])  # utime, cutime (fields 14, 16)
        system += int(fields[12]) + int(fields[14])  # stime, cstime (fields 15, 17)
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children (:func:`cpu_split`)."""
    return sum(cpu_split(pid))


def memory(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` in bytes of process ``pid`` and its live children, summed
    (the peak of the sum is at most the sum of the peaks), from /proc."""
    out: dict[str, int] = {"VmRSS": 0, "VmHWM": 0}
    for member in family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in out:
                    out[key] += int(value.split()[0]) * 1024
    return out


def reset_peak(pid: int) -> bool:
    """Reset the ``VmHWM`` of process ``pid`` and its live children to their current RSS
    (``clear_refs`` 5); whether the kernel allowed it for all of them."""
    try:
        for member in family(pid):
            Path(f"/proc/{member}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Sampler:
    """Reads every node's CPU seconds and RSS from /proc every ``interval`` seconds in a
    thread (the nodes are not asked anything), stamped with ``time.time()`` — the clock of
    the nodes' ``/status`` timings — so that CPU and memory can be split by round phase."""

    def __init__(self, pids: dict[str, int], interval: float = 0.1) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError, KeyError, ValueError):
                now = time.time()
                self.samples[name].append((now, cpu_seconds(pid), memory(pid)["VmRSS"]))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def phases(self, name: str, bounds: list[tuple[str, float]]) -> list[dict[str, Any]]:
        """Per phase ``(label, end time)`` of node ``name`` (consecutive, starting at the
        first sample): CPU seconds (between the samples nearest the bounds), wall seconds
        and the largest RSS sampled in it."""
        samples = self.samples[name]
        if not samples:
            return []

        def nearest(t: float) -> int:
            return min(range(len(samples)), key=lambda i: abs(samples[i][0] - t))

        out = []
        start = samples[0][0]
        for label, end in bounds:
            if end < start:
                continue
            i, j = nearest(start), nearest(end)
            window = [rss for t, _, rss in samples if start <= t <= end] or [samples[j][2]]
            out.append({"phase": label, "wall_seconds": end - start,
                        "cpu_seconds": samples[j][1] - samples[i][1],
                        "max_rss_bytes": max(window)})  # fmt: skip
            start = end
        return out


def phase_bounds(role: str, entry: dict[str, Any]) -> list[tuple[str, float]]:
    """The round's phases at one node and when each ended (unix seconds), from its
    ``/status`` entry: a mix takes in, mixes, forwards and then waits for the trace (the
    last mix holds its batch for the trace and forwards after it); the analyzer takes in
    and analyzes."""
    closed, mixed, finished = entry.get("closed"), entry.get("mixed"), entry.get("finished")
    if closed is None or finished is None:
        return []
    if role == "analyzer":
        return [("intake", closed), ("analyze", finished)]
    if mixed is None:
        return []
    released = entry.get("released")
    if released is not None:  # the last mix
        return [("intake", closed), ("mix", mixed), ("trace", released),
                ("forward", finished)]  # fmt: skip
    forwarded = mixed + float(entry.get("forward_seconds", 0.0))
    return [("intake", closed), ("mix", mixed), ("forward", forwarded), ("trace", finished)]


# --------------------------------------------------------------------------- processes


def get_json(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=2.0) as response:
        return json.loads(response.read())


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class Node:
    name: str
    port: int
    proc: subprocess.Popen[bytes]


class Nodes:
    """The node processes this benchmark started; :meth:`stop_all` ends every one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.nodes: list[Node] = []

    def start(self, name: str, port: int, args: list[str]) -> None:
        with (self.directory / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cloaknet", "node", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.nodes.append(Node(name, port, proc))

    def check_alive(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is not None:
                log = (self.directory / f"{node.name}.log").read_text(errors="replace")
                raise BenchError(f"node {node.name} exited with {node.proc.returncode}:\n"
                                 f"{log[-2000:]}")  # fmt: skip

    def stop_all(self) -> None:
        stop_processes((node.proc for node in self.nodes), 10.0)


# --------------------------------------------------------------------------- crypto floor


def _cpu_per_op(run: Any, ops: int) -> float:
    """CPU seconds per call of ``run()`` (best of 3 batches of ``ops`` calls)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(ops):
            run()
        best = min(best, time.process_time() - start)
    return best / ops


#: Bytes of a layer's derived AEAD key, and of the key and nonce together (format v2).
KDF_KEY_BYTES, KDF_BYTES = 32, 32 + 12


def _kdf(shared: bytes, ephemeral: bytes, recipient: bytes) -> tuple[bytes, bytes]:
    """The layer's AEAD key and nonce (:func:`mixnet.onion.layer_key`, without its checks)."""
    okm = hashlib.blake2b(shared + ephemeral + recipient, digest_size=KDF_BYTES,
                          person=KDF_PERSONAL).digest()  # fmt: skip
    return okm[:KDF_KEY_BYTES], okm[KDF_KEY_BYTES:]


def raw_seal(plaintext: bytes, public: bytes, aad: bytes) -> bytes:
    """One v2 layer from the primitives alone: key pair, X25519, BLAKE2b, ChaCha20-Poly1305."""
    ephemeral_public, ephemeral_secret = bindings.crypto_box_keypair()
    shared = bindings.crypto_scalarmult(ephemeral_secret, public)
    key, nonce = _kdf(shared, ephemeral_public, public)
    return ephemeral_public + bindings.crypto_aead_chacha20poly1305_ietf_encrypt(
        plaintext, aad, nonce, key
    )


def raw_open(layer: bytes, public: bytes, secret: bytes, aad: bytes) -> bytes:
    """One v2 layer opened from the primitives alone: X25519, BLAKE2b, ChaCha20-Poly1305."""
    ephemeral = layer[:PUBLIC_KEY_LENGTH]
    shared = bindings.crypto_scalarmult(secret, ephemeral)
    key, nonce = _kdf(shared, ephemeral, public)
    return bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
        layer[PUBLIC_KEY_LENGTH:], aad, nonce, key
    )


def direct_open_cpu(layer: bytes, public: bytes, secret: bytes, aad: bytes, ops: int) -> float:
    """CPU seconds per open of ``layer`` with libsodium's functions called directly through
    CFFI into buffers allocated once, as the mixes' peel workers call them
    (:func:`mixnet.onion.peel_many_raw`), without their checks, slicing or result copies:
    X25519, the BLAKE2b key derivation and ChaCha20-Poly1305-IETF plus one Python loop
    iteration (best of 3 batches of ``ops``). :func:`raw_open` goes through PyNaCl's checked
    wrappers instead, which allocate and check per call: a few µs more per layer.

    :raises BenchError: the layer does not open to what :func:`raw_open` opens it to.
    """
    shared_buffer = sodium_ffi.new("unsigned char[]", PUBLIC_KEY_LENGTH)  # X25519's output
    ephemeral, sealed = layer[:PUBLIC_KEY_LENGTH], layer[PUBLIC_KEY_LENGTH:]
    out = sodium_ffi.new("unsigned char[]", len(sealed))
    shared = sodium_ffi.buffer(shared_buffer, PUBLIC_KEY_LENGTH)
    kdf = hashlib.blake2b(digest_size=KDF_BYTES, person=KDF_PERSONAL).copy
    scalarmult = sodium_lib.crypto_scalarmult
    decrypt = sodium_lib.crypto_aead_chacha20poly1305_ietf_decrypt
    null, sealed_length, aad_length = sodium_ffi.NULL, len(sealed), len(aad)

    def batch(count: int) -> int:
        failures = 0
        for _ in range(count):
            failures += scalarmult(shared_buffer, secret, ephemeral)
            h = kdf()
            h.update(shared)
            h.update(ephemeral)
            h.update(public)
            okm = h.digest()
            failures += decrypt(out, null, null, sealed, sealed_length, aad, aad_length,
                                okm[KDF_KEY_BYTES:], okm[:KDF_KEY_BYTES])  # fmt: skip
        return failures

    plain = sodium_ffi.buffer(out, sealed_length - AEAD_TAG_LENGTH)
    if batch(1) or plain[:] != raw_open(layer, public, secret, aad):
        raise BenchError("a direct libsodium open disagrees with the format")
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        failures = batch(ops)
        best = min(best, time.process_time() - start)
        if failures:
            raise BenchError("a direct libsodium open failed")
    return best / ops


def crypto_rates(payload_length: int, mixes: int, messages: int,
                 ops: int) -> list[dict[str, float]]:  # fmt: skip
    """Per hop h (0 = entry): CPU seconds, one core, per layer of onion format v2 sealed
    (:func:`raw_seal`) around that hop's plaintext and per layer opened (:func:`raw_open`)
    as that hop receives it — at the entry mix the submission box (one per user: the ``m``
    inner onions), at a later mix one onion (``m`` per user). Each is checked against
    :func:`mixnet.onion.seal_layer` first."""
    public, secret = bindings.crypto_box_keypair()
    rows = []
    for hop in range(mixes):
        inner = onion_length(payload_length, mixes - hop - 1)
        plain_length = messages * inner if hop == 0 else inner
        length = (submission_length(payload_length, mixes, messages) if hop == 0
                  else onion_length(payload_length, mixes - hop))  # fmt: skip
        plaintext = os.urandom(plain_length)
        aad = binding_data(chain_id="bench", round_id=1, hop_index=hop)
        layer = seal_layer(plaintext, public, chain_id="bench", round_id=1, hop_index=hop)
        assert len(layer) == length and raw_open(layer, public, secret, aad) == plaintext
        assert len(raw_seal(plaintext, public, aad)) == length
        seal = _cpu_per_op(lambda p=plaintext, a=aad: raw_seal(p, public, a), ops)
        opened = _cpu_per_op(lambda s=layer, a=aad: raw_open(s, public, secret, a), ops)
        direct = direct_open_cpu(layer, public, secret, aad, ops)
        rows.append({"hop": hop, "layer_bytes": length, "plaintext_bytes": plain_length,
                     "layers_per_user": 1 if hop == 0 else messages,
                     "seal_cpu_seconds": seal, "open_cpu_seconds": opened,
                     "open_direct_cpu_seconds": direct,
                     "seals_per_second": 1 / seal, "opens_per_second": 1 / opened,
                     "opens_direct_per_second": 1 / direct})  # fmt: skip
    return rows


def mean_rates(before: list[dict[str, float]],
               after: list[dict[str, float]]) -> list[dict[str, float]]:  # fmt: skip
    """Per hop, the mean of two :func:`crypto_rates` measurements: the CPU costs averaged,
    the rates their inverses."""
    rows = []
    for b, a in zip(before, after, strict=True):
        row = dict(b)
        for key in ("seal_cpu_seconds", "open_cpu_seconds", "open_direct_cpu_seconds"):
            row[key] = (b[key] + a[key]) / 2
        row["seals_per_second"] = 1 / row["seal_cpu_seconds"]
        row["opens_per_second"] = 1 / row["open_cpu_seconds"]
        row["opens_direct_per_second"] = 1 / row["open_direct_cpu_seconds"]
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the round


def write_chain(directory: Path, args: argparse.Namespace) -> tuple[Path, list[str], list[int],
                                                                     dict[str, Any]]:
    """Keys and a chain file for rounds of exactly ``args.users`` users, as the demo writes
    them; returns the chain file, the mix names, the ports (mixes then analyzer) and the
    choice's summary."""
    choice = choose(args.protocol, args.users, args.epsilon, args.delta, mode=args.mode,
                    bound=args.bound, precision=args.precision)  # fmt: skip
    policy = RoundPolicy(min_users=args.users, max_users=args.users, deadline_seconds=3600.0,
                         below_min="wait")  # fmt: skip
    local = local_chain(directory, chain_id="bench", mixes=args.mixes, policy=policy, host=HOST)
    chain_path = directory / "chain.toml"
    write_chain_file(chain_path, local.config, choice.chain_table(args.precision),
                     choice.cloak_plan)  # fmt: skip
    return chain_path, local.names, local.ports, dict(choice.summary)


def round_entry(status: dict[str, Any], round_id: int) -> dict[str, Any]:
    for info in status.get("rounds", []):
        if isinstance(info, dict) and info.get("round") == round_id:
            return info
    return {}


async def wait_finished(
    nodes: Nodes, round_id: int, timeout: float, console: Console
) -> tuple[list[dict[str, Any]], bool]:
    """Every node's ``/status`` entry for ``round_id`` once all are in a terminal status,
    and ``True``; after ``timeout`` seconds the entries as they are, and ``False`` (the
    CPU and memory are then read anyway)."""
    limit = time.monotonic() + timeout
    while True:
        nodes.check_alive()
        entries = [round_entry(await asyncio.to_thread(get_json, n.port, "/status"), round_id)
                   for n in nodes.nodes]  # fmt: skip
        if all(e.get("status") in TERMINAL for e in entries):
            return entries, True
        if time.monotonic() > limit:
            console.log(f"round {round_id} did not finish everywhere within {timeout:g} s: "
                        f"{[e.get('status') for e in entries]}")  # fmt: skip
            return entries, False
        await asyncio.sleep(0.2)


async def wait_quiet(nodes: Nodes, timeout: float, *, window: float = 1.0,
                     busy: float = 0.05) -> float:  # fmt: skip
    """Wait until the nodes together use less than ``busy`` of a core over ``window`` seconds
    (a node's work after the round — erasing the intake, checkpointing the WAL — would slow
    the rates measured next), at most ``timeout`` seconds; return the seconds waited."""
    start = time.monotonic()
    last = sum(cpu_seconds(n.proc.pid) for n in nodes.nodes)
    while time.monotonic() - start < timeout:
        await asyncio.sleep(window)
        now = sum(cpu_seconds(n.proc.pid) for n in nodes.nodes)
        if now - last < busy * window:
            break
        last = now
    return time.monotonic() - start


async def drive(args: argparse.Namespace, chain_path: Path, nodes: Nodes,
                values: list[float], console: Console) -> dict[str, Any]:  # fmt: skip
    chain = load_chain(chain_path)
    async with LoadGenerator(chain, workers=args.workers, connections=args.connections,
                             per_frame=args.per_frame, retry_for=600.0) as load:  # fmt: skip
        info = await load.current_round()
        console.log(f"round {info.round_id} open; measuring the layers' seal/open rates")
        rates = crypto_rates(chain.payload_length, len(chain.config.mixes), chain.messages,
                             args.crypto_ops)  # fmt: skip
        console.log(f"wrapping {len(values):,} submissions on {load.workers} workers")
        wrapped = await load.wrap(info, values)
        console.log(f"wrapped in {wrapped.wall_seconds:.2f} s "
                    f"({wrapped.cpu_seconds:.2f} CPU s); sending")  # fmt: skip
        idle = {}
        for node in nodes.nodes:
            mem = memory(node.proc.pid)
            idle[node.name] = {"cpu": cpu_seconds(node.proc.pid), "rss": mem["VmRSS"],
                               "system": cpu_split(node.proc.pid)[1],
                               "peak_reset": reset_peak(node.proc.pid)}  # fmt: skip
        load_before = os.getloadavg()
        sampler = Sampler({node.name: node.proc.pid for node in nodes.nodes})
        sampler.start()
        t0 = time.perf_counter()
        sending = asyncio.create_task(load.send(info, wrapped))
        while not sending.done():
            nodes.check_alive()
            await asyncio.wait({sending}, timeout=0.5)
        sent = await sending
        console.log(f"{sent.submissions:,} submissions acknowledged in {sent.wall_seconds:.2f} s;"
                    " waiting for the result")  # fmt: skip
        async with connect(chain, connections=1, retry_for=600.0) as net:
            result_task = asyncio.create_task(net.result(info.round_id, timeout=args.timeout))
            while not result_task.done():
                nodes.check_alive()
                await asyncio.wait({result_task}, timeout=0.5)
            result = await result_task
        wall = time.perf_counter() - t0
        console.log(f"result after {wall:.2f} s; waiting for every node to finish the round")
        entries, settled = await wait_finished(nodes, info.round_id, args.settle_timeout,
                                               console)  # fmt: skip
        settle = time.perf_counter() - t0
        sampler.stop()
        load_after = os.getloadavg()
        quiet = await wait_quiet(nodes, args.settle_timeout)
        console.log(f"nodes idle after {quiet:.1f} s more; measuring the layers' seal/open rates"
                    " again")  # fmt: skip
        rates_after = crypto_rates(chain.payload_length, len(chain.config.mixes), chain.messages,
                                   args.crypto_ops)  # fmt: skip
        per_node = []
        for hop, (node, entry) in enumerate(zip(nodes.nodes, entries, strict=True)):
            mem = memory(node.proc.pid)
            role = "analyzer" if hop == len(nodes.nodes) - 1 else "mix"
            per_node.append({"name": node.name, "pid": node.proc.pid,
                             "cpu_seconds": cpu_seconds(node.proc.pid) - idle[node.name]["cpu"],
                             "system_cpu_seconds": cpu_split(node.proc.pid)[1]
                             - idle[node.name]["system"],
                             "idle_rss_bytes": idle[node.name]["rss"],
                             "peak_rss_bytes": mem["VmHWM"],
                             "peak_reset": idle[node.name]["peak_reset"],
                             "status": entry,
                             "phases": sampler.phases(node.name,
                                                      phase_bounds(role, entry))})  # fmt: skip
    return {"round": info.round_id, "rates": mean_rates(rates, rates_after),
            "rates_before": rates, "rates_after": rates_after, "wrapped": wrapped, "sent": sent,
            "result": result.raw, "wall": wall, "settle": settle, "settled": settled,
            "nodes": per_node, "quiet_seconds": quiet,
            "load_before": load_before, "load_after": load_after}  # fmt: skip


def summarize(args: argparse.Namespace, summary: dict[str, Any], names: list[str],
              values: list[float], out: dict[str, Any], payload_length: int,
              messages_per_user: int) -> dict[str, Any]:  # fmt: skip
    users, mixes = args.users, args.mixes
    m = messages_per_user
    messages = users * m
    rates = out["rates"]
    # layers sealed: one box per user for hop 0, one layer per share for every later hop
    client_floor = sum(users * r["layers_per_user"] * r["seal_cpu_seconds"] for r in rates)
    nodes: list[dict[str, Any]] = []
    for hop, node in enumerate(out["nodes"]):
        is_mix = hop < mixes
        if hop == 0:  # one submission box per user
            items_in, item_length = users, submission_length(payload_length, mixes, m)
        elif is_mix:
            items_in, item_length = messages, onion_length(payload_length, mixes - hop)
        else:
            items_in, item_length = messages, payload_length
        floor = items_in * rates[hop]["open_cpu_seconds"] if is_mix else 0.0
        direct = items_in * rates[hop]["open_direct_cpu_seconds"] if is_mix else 0.0
        ciphertext = items_in * item_length
        above = node["peak_rss_bytes"] - node["idle_rss_bytes"]
        nodes.append({
            "name": node["name"],
            "role": "mix" if is_mix else "analyzer",
            "hop": hop,
            "cpu_seconds": node["cpu_seconds"],
            "system_cpu_seconds": node["system_cpu_seconds"],
            "floor_cpu_seconds": floor,
            "cpu_over_floor": node["cpu_seconds"] / floor if floor else None,
            "floor_direct_cpu_seconds": direct,
            "cpu_over_floor_direct": node["cpu_seconds"] / direct if direct else None,
            "items_in": items_in,
            "item_length": item_length,
            "wire_bytes_per_user": ciphertext // users,
            "ciphertext_bytes_in": ciphertext,
            "idle_rss_bytes": node["idle_rss_bytes"],
            "peak_rss_bytes": node["peak_rss_bytes"],
            "rss_above_idle_bytes": above,
            "rss_over_ciphertext": above / ciphertext,
            "peak_reset": node["peak_reset"],
            "round_status": node["status"],
            "phases": node["phases"],
        })
    nodes_floor = sum(n["floor_cpu_seconds"] for n in nodes)
    nodes_floor_direct = sum(n["floor_direct_cpu_seconds"] for n in nodes)
    node_cpu = sum(n["cpu_seconds"] for n in nodes)

    def nodes_floor_at(measured: list[dict[str, float]]) -> float:
        """The mixes' opens priced at one measurement's rates (box at hop 0, onions after)."""
        return float(sum((users if hop == 0 else messages) * measured[hop]["open_cpu_seconds"]
                         for hop in range(mixes)))  # fmt: skip

    x25519_per_submission = 3 * (m * (mixes - 1) + 1)
    wrapped, sent = out["wrapped"], out["sent"]
    result = out["result"]
    record: dict[str, Any] = {
        "users": users,
        "messages": messages,
        "messages_per_user": messages_per_user,
        "payload_length": payload_length,
        "mixes": mixes,
        **{k: summary[k] for k in ("protocol", "mode", "bound", "noise") if k in summary},
        "round": out["round"],
        "wall_seconds": out["wall"],
        "settle_seconds": out["settle"],
        "settled": out["settled"],
        "submit_seconds": sent.wall_seconds,
        "cpu_seconds": node_cpu,
        "peel_processes": (os.cpu_count() or 1) if args.peel_processes is None
        else args.peel_processes,
        "loadgen": {
            "workers": wrapped.workers,
            "connections": sent.connections,
            "submissions_per_frame": args.per_frame,
            "wrap_wall_seconds": wrapped.wall_seconds,
            "wrap_cpu_seconds": wrapped.cpu_seconds,
            "worker_cpu_seconds": wrapped.worker_cpu_seconds,
            "send_wall_seconds": sent.wall_seconds,
            "send_cpu_seconds": sent.cpu_seconds,
            "cpu_seconds": wrapped.worker_cpu_seconds + sent.cpu_seconds,
            "submissions_per_second": sent.submissions / sent.wall_seconds,
        },
        "x25519_per_share": x25519_per_submission / m,
        "x25519_per_submission": x25519_per_submission,
        "x25519_total": x25519_per_submission * users,
        "x25519_per_share_v1": 3 * mixes,
        "x25519_counting_rule": COUNTING_RULE,
        "wire_bytes_per_user": {n["name"]: n["wire_bytes_per_user"] for n in nodes},
        "crypto_rates": rates,
        "crypto_rates_before": out["rates_before"],
        "crypto_rates_after": out["rates_after"],
        "crypto_floor_cpu_seconds": client_floor + nodes_floor,
        "crypto_floor_clients_cpu_seconds": client_floor,
        "crypto_floor_nodes_cpu_seconds": nodes_floor,
        "cpu_over_floor": node_cpu / nodes_floor,
        # the same at each measurement's rates alone: how much the floor's drift moves it
        "cpu_over_floor_at_rates": {
            "before": node_cpu / nodes_floor_at(out["rates_before"]),
            "after": node_cpu / nodes_floor_at(out["rates_after"]),
        },
        # the same over the opens priced at direct libsodium calls (direct_open_cpu): the
        # stricter floor, without PyNaCl's per-call wrappers
        "crypto_floor_nodes_direct_cpu_seconds": nodes_floor_direct,
        "cpu_over_floor_direct": node_cpu / nodes_floor_direct,
        "quiet_seconds": out["quiet_seconds"],
        # the nodes' CPU and the generator's encoding + wrapping CPU over the whole floor
        "cpu_over_floor_all_parties": (node_cpu + wrapped.cpu_seconds)
        / (client_floor + nodes_floor),
        "nodes": nodes,
        "result": result,
        "true_sum": float(np.sum(values)),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_before": out["load_before"],
            "load_average_after": out["load_after"],
        },
    }
    precision = result.get("precision")
    if "estimate_exact" in result and precision is not None:
        rounded = Fraction(sum(quantize(v, int(precision)) for v in values), int(precision))
        exact = f"{rounded.numerator}/{rounded.denominator}"
        record["rounded_sum_exact"] = exact
        record["exact"] = result["estimate_exact"] == exact
    return record


def print_table(record: dict[str, Any], console: Console) -> None:
    title = (f"one round: {record['users']:,} users × m = {record['messages_per_user']} = "
             f"{record['messages']:,} messages, {record['mixes']} mixes, {record['protocol']}, "
             f"{record['mode']}")  # fmt: skip
    table = Table(title=title)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    gen = record["loadgen"]
    rows = [
        ("wall (first submit → result)", f"{record['wall_seconds']:.2f} s"),
        ("  of it submitting", f"{record['submit_seconds']:.2f} s "
                               f"({gen['submissions_per_second']:,.0f} users/s)"),
        ("every node finished" if record["settled"] else "gave up waiting for the nodes",
         f"{record['settle_seconds']:.2f} s"),
        ("nodes' CPU", f"{record['cpu_seconds']:.2f} s"),
        ("nodes' crypto floor (opens)", f"{record['crypto_floor_nodes_cpu_seconds']:.2f} s"),
        ("cpu_over_floor (nodes)", f"{record['cpu_over_floor']:.2f}"),
        ("  over the opens at direct libsodium calls",
         f"{record['cpu_over_floor_direct']:.2f} "
         f"(floor {record['crypto_floor_nodes_direct_cpu_seconds']:.2f} s)"),
        ("clients' crypto floor (seals)",
         f"{record['crypto_floor_clients_cpu_seconds']:.2f} s"),
        ("CPU over floor, all parties", f"{record['cpu_over_floor_all_parties']:.2f}"),
        ("load generator: wrap", f"{gen['wrap_wall_seconds']:.2f} s wall, "
                                 f"{gen['wrap_cpu_seconds']:.2f} s CPU on {gen['workers']} "
                                 "workers"),
        ("load generator: CPU (workers + sender)",
         f"{gen['worker_cpu_seconds']:.2f} + {gen['send_cpu_seconds']:.2f} s"),
        ("X25519 per share", f"{record['x25519_per_share']:.3f} (3(L−1) + 3/m: 2 per seal, "
                             f"1 per open; v1: {record['x25519_per_share_v1']})"),
        ("wire bytes per user, per hop",
         " / ".join(f"{v:,}" for v in record["wire_bytes_per_user"].values())
         + " (" + " / ".join(record["wire_bytes_per_user"]) + ")"),
    ]
    if "exact" in record:
        rows.append(("estimate = rounded sum", str(record["exact"])))
    else:
        rows.append(("estimate / true sum", f"{record['result'].get('estimate', float('nan')):.4f}"
                                            f" / {record['true_sum']:.4f}"))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    nodes = Table(title="per node")
    for col in ("node", "items in × bytes", "bytes/user", "CPU s", "over floor", "idle RSS",
                "peak RSS", "ciphertext in", "RSS↑ / ciphertext"):
        nodes.add_column(col, justify="right")
    for n in record["nodes"]:
        over = "—" if n["cpu_over_floor"] is None else f"{n['cpu_over_floor']:.2f}"
        nodes.add_row(n["name"], f"{n['items_in']:,} × {n['item_length']:,}",
                      f"{n['wire_bytes_per_user']:,}", f"{n['cpu_seconds']:.2f}", over,
                      f"{n['idle_rss_bytes'] / 2**20:.0f} MiB",
                      f"{n['peak_rss_bytes'] / 2**20:.0f} MiB",
                      f"{n['ciphertext_bytes_in'] / 2**20:.1f} MiB",
                      f"{n['rss_over_ciphertext']:.2f}")  # fmt: skip
    console.print(nodes)
    phases = Table(title="per node and phase: CPU s / wall s / max RSS (sampled every 0.1 s)")
    labels = ("intake", "mix", "forward", "trace", "analyze")
    phases.add_column("node", justify="right")
    for label in labels:
        phases.add_column(label, justify="right")
    for n in record["nodes"]:
        cells = {p["phase"]: f"{p['cpu_seconds']:.2f} / {p['wall_seconds']:.2f} / "
                             f"{p['max_rss_bytes'] / 2**20:.0f} MiB" for p in n["phases"]}
        phases.add_row(n["name"], *(cells.get(label, "") for label in labels))
    console.print(phases)
    load = record["machine"]
    console.print(f"{load['cpus']} CPUs; load average before {load['load_average_before'][0]:.2f}"
                  f", after {load['load_average_after'][0]:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", "-n", type=int, default=1000)
    parser.add_argument("--protocol", choices=DEMO_PROTOCOLS, default="plan",
                        help="as for cloaknet demo (default plan: what cloaknet plan selects)")
    parser.add_argument("--mixes", type=int, default=3)
    parser.add_argument("--mode", choices=("single-user", "sum-preserving"),
                        default="single-user")
    parser.add_argument("--bound", default="auto")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--precision", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None,
                        help="wrapping processes (default: one per core)")
    parser.add_argument("--connections", type=int, default=16,
                        help="websockets to the entry mix (default 16)")
    parser.add_argument("--per-frame", type=int, default=64,
                        help="submissions per frame to the entry mix: 1 sends one 'submit' "
                        "frame per user, more a 'submit-many' frame of that many users' "
                        "boxes (default 64, at most the chain's max_submissions_per_frame, "
                        "256)")
    parser.add_argument("--peel-processes", type=int, default=None, metavar="N",
                        help="passed to every mix's 'cloaknet node --peel-processes': peel "
                        "in N worker processes, 0 in threads of the node (default: the "
                        "node's default, one per core)")
    parser.add_argument("--crypto-ops", type=int, default=2000,
                        help="libsodium operations per rate measurement (default 2000)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds to wait for the result (default 3600)")
    parser.add_argument("--settle-timeout", type=float, default=120.0,
                        help="seconds to wait, after the result, for every node to finish "
                        "the round (default 120; then measured as it stands)")
    parser.add_argument("--data-seed", type=int, default=None,
                        help="seed of the input data only (protocol randomness: OS CSPRNG)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    parser.add_argument("--keep", action="store_true", help="keep the chain directory")
    parser.add_argument("--dir", type=Path, default=None, metavar="DIR",
                        help="write the chain (keys, databases, logs) into DIR, a new "
                        "directory, and keep it (default: a temporary directory)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.users < 1 or args.mixes < 1:
        parser.error("--users and --mixes must be >= 1")
    if args.peel_processes is not None and args.peel_processes < 0:
        parser.error("--peel-processes must be >= 0")
    console = Console(stderr=True, quiet=args.quiet)
    if args.dir is not None:
        args.dir.mkdir(mode=0o700, parents=True)
        args.keep = True
    directory = args.dir or Path(tempfile.mkdtemp(prefix="cloaknet-bench-"))
    nodes = Nodes(directory)
    values = np.random.default_rng(args.data_seed).random(args.users).tolist()
    with sigterm_interrupts():  # kill or a timeout: the nodes are stopped too
        try:
            try:
                chain_path, names, ports, summary = write_chain(directory, args)
            except CloakError as exc:
                Console(stderr=True).print(f"bench_round: {exc}")
                return 2
            chain = load_chain(chain_path)
            base = ["--chain", str(chain_path)]
            nodes.start("analyzer", ports[-1], [*base, "--name", "analyzer"])
            for name, port in reversed(list(zip(names, ports, strict=False))):
                peel = ([] if args.peel_processes is None
                        else ["--peel-processes", str(args.peel_processes)])  # fmt: skip
                nodes.start(name, port, [*base, "--name", name, "--key",
                                         str(directory / f"{name}.key"), *peel])  # fmt: skip
            nodes.nodes.sort(key=lambda n: ports.index(n.port))  # chain order: mixes, analyzer
            limit = time.monotonic() + 60
            while not all(healthy(p) for p in ports):
                nodes.check_alive()
                if time.monotonic() > limit:
                    raise BenchError("nodes did not report /healthz within 60 s")
                time.sleep(0.05)
            console.log(f"{args.mixes} mixes and the analyzer up in {directory}")
            out = asyncio.run(drive(args, chain_path, nodes, values, console))
        finally:
            nodes.stop_all()
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
    record = summarize(args, summary, names, values, out, chain.payload_length, chain.messages)
    record["directory"] = str(directory) if args.keep else None
    print_table(record, Console(width=120))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2, default=str))
        console.log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: main stopped every node it started
        print("bench_round: interrupted; every node was stopped", file=sys.stderr)
        sys.exit(130)
