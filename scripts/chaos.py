#!/usr/bin/env python3
"""Chaos run of a real chain: SIGKILL any node at any round phase, restart it, and check that
every acknowledged submission is counted exactly once.

::

    .venv/bin/python scripts/chaos.py --points 30 --json /tmp/chaos.json

The driver writes a chain directory (chain file, identity keys) for ``--mixes`` mixes (3 to
5; default 3) and the analyzer, and starts each as its own OS process (``python -m cloaknet
node --chain ... --name ... --db ...``, every node with its own sqlite database) on free
127.0.0.1 ports. The chain runs the cloak in sum-preserving mode (no noise) with explicit
``[protocol]`` parameters, and rounds of exactly ``--users`` users (``min_users = max_users``).

Every kill point runs one round. Its target is the next node in turn (every mix in chain order,
then the analyzer); its phase is drawn (seeded by ``--seed``) from the phases of that node's
kind (entry mix, middle mix — every mix between the first and the last —, last mix, analyzer):

* ``submitting`` — about half the users were acknowledged, more are in flight;
* ``closed`` — right after the closing submission reached the entry mix;
* ``receiving`` — (middle and last mix) the predecessor is forwarding its batch to the target;
* ``forwarding`` — a mix target has mixed and is forwarding (for the analyzer: the last mix's
  predecessor is);
* ``assembling`` — the last mix is forwarding to the analyzer, which assembles the batch.

Phases are detected by polling the nodes' ``/status`` round statuses (``submitting`` and
``closed`` by timing: a seeded 0..8 ms after the probe's submission was sent); once the phase is
seen the kill waits a seeded fraction (0..0.8) of the sending hop's usual forwarding time, so
that kills land throughout the phase. The target is then killed with SIGKILL (if the round went
past the phase meanwhile, the kill happens anyway and the table's ``status`` column says
"late"), its database files are copied to show what it had stored at that moment (column
``stored at kill``: the round's status, stored submissions, chunks received ``in``, outbound
chunks ``acked``), it is restarted at once with the same command and database, and the round
is left to finish.

Every round must also end at every mix as it did at the analyzer (``confirmed`` for a
result, ``aborted`` for an abort), as their ``/status`` shows: a mix that ends a round erases
its key and intake.

Exactness. Users submit known integer shares through the client library (``submit_shares``):
each user of a point has the integer value ``4**slot`` (its own slot; consecutive points use
different slots while they fit the 64-bit precision k = 4**slots), split into ``m`` shares that
are uniform modulo N but add up to it. The analyzer publishes the raw sum Σ y mod N and the
estimate Σ/k (exact fraction, never clamped: every sum stays below k), so the base-4 digits of
the raw sum are how many times each user was counted: a digit 0 for an acknowledged user is a
*lost* submission, a digit >= 2 (or a digit of a user not acknowledged in that round) a
*doubled* one. Each round's ``users`` must also equal the number of submissions the entry mix
acknowledged into it, and its estimate must equal the expected sum / k exactly.

A lost ``accepted``: in every point one user (the *probe*) sends its ``submit`` frame (in
every other point, its submission alone in a ``submit-many`` frame) over a raw websocket and
never reads the reply; after the kill and restart it resends the identical
frame through a :class:`mixnet.link.Link`, exactly as the client library does after a lost
reply. The entry mix must acknowledge it again (from its receipts) in the same round, and the
analyzer must count it once. Library users whose connection broke resend on their own; the
table's ``resent`` column counts those resends (the probe's included).

Poisoned submissions (``--poison layer``, ``payload`` or ``twins``). In every point one more
client (the *poisoner*, before the users) submits a submission the trace must exclude: with
``layer`` the chain runs with ownership proofs and the box's first inner onion is random bytes
at a mix after the first (mix 2 to the last, the next one at each point and one further at
each turn of the targets, so that every node is killed with each): that mix cannot peel it,
keeps the failure for the trace and proves it (``no-owner``); with ``payload`` (a chain
without proofs) every layer opens but one share (``--bad-shares K``: K shares; more than one
``accused`` reply carries make the trace go in pages) is not reduced mod N, which the
analyzer's validator at the last mix refuses (``invalid-payload``); with ``twins`` two of its onions
differ in every layer up to a mix between the first and the last (chosen likewise) and hold
one onion after it, which that mix peels twice, leaves out and accuses (``duplicate``; a
trace reply carries at least two accusations, so this works with chunks of any size). The
poisoner takes one user's place in the round, is never counted, and the round must end with
``excluded = 1``, whichever node was killed when.

Aborted rounds (``--abort``, with ``--poison``). The rounds have ``min_users = users``, so
excluding the poisoner leaves too few and the entry mix aborts every round after its trace,
whichever node was killed when. The round must end ``aborted`` at the entry mix as at the
analyzer, and none of its values may be counted in any round. A value is counted once only if
its client submitted it again and was acknowledged in a later round: a probe whose resend is
answered ``round-closed`` (the abort came first and its receipts are gone) submits afresh,
and the library does the same for users.

Two at once (``--pairs``). The target and the next node in the chain (after the analyzer: the
entry mix) are SIGKILLed together and restarted together, as when a host running both goes
down; the table's node column names both.

TLS (``--tls``). Every node then serves ``wss://`` (and its HTTP routes over HTTPS) with a
certificate issued by a CA made for the chain (trustme), which the chain file's ``[tls]``
names: every link between nodes, the client library and the driver's own connections speak
TLS, through every kill and restart.

Output: a table (kill point, node, phase, status at the kill, stored at kill, round,
recovered, lost, doubled, resent, seconds), the line ``N of N recovered, 0 lost, 0 doubled``
with the run time, and with ``--json PATH`` every detail as JSON. Exit code 0 if every point
recovered exactly, 1 otherwise. Each point has a timeout (``--point-timeout``) and the whole run
a limit (``--time-limit``); a point that fails keeps its chain directory (logs and databases)
and the next point starts a fresh chain. Every process started is stopped on exit, on error and
on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from cloaknet.chainfile import SINK_TABLE, generate_node_keys, write_chain_file
from cloaknet.client import ChainClient, Receipt, RoundAborted, RoundFailed, connect
from cloaknet.encoding import encode_share
from cloaknet.params import CloakParams
from cloaknet.process_chain import sigterm_interrupts, stop_processes
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.client import MAX_REPLY, RoundInfo
from mixnet.errors import RoundClosed
from mixnet.link import Link
from mixnet.onion import onion_length, seal_layer, wrap
from mixnet.tls import TlsConfig, client_context
from mixnet.wire import encode_frame, get_int

HOST = "127.0.0.1"
ANALYZER = "analyzer"
#: Mixes a chain may have (``--mixes``).
MIX_COUNTS = range(3, 6)


def mix_names(mixes: int) -> tuple[str, ...]:
    """The chain's mixes in order: ``mix1`` (the entry mix) .. ``mix<mixes>`` (the last)."""
    return tuple(f"mix{i}" for i in range(1, mixes + 1))


def node_names(mixes: int) -> tuple[str, ...]:
    """Every node of the chain in order: its mixes, then the analyzer."""
    return (*mix_names(mixes), ANALYZER)


def kind_of(name: str, mixes: int) -> str:
    """The node's kind: ``entry``, ``middle`` (every mix between the first and the last),
    ``last`` or ``analyzer``."""
    if name == ANALYZER:
        return "analyzer"
    index = mix_names(mixes).index(name)
    return "entry" if index == 0 else "last" if index == mixes - 1 else "middle"


PHASES: dict[str, tuple[str, ...]] = {
    "entry": ("submitting", "closed", "forwarding", "assembling"),
    "middle": ("submitting", "closed", "receiving", "forwarding", "assembling"),
    "last": ("submitting", "closed", "receiving", "forwarding", "assembling"),
    "analyzer": ("submitting", "closed", "forwarding", "assembling"),
}
#: At most this many consecutive points give their users distinct base-4 digits (a value
#: counted again in a later point's round then still shows up as a digit of its own point).
WINDOW = 4
#: The precision k = 4**slots must fit the chain file's 64-bit TOML integers.
MAX_SLOTS = 31
#: Seconds to wait for a phase before killing anyway (the kill is then marked late).
PHASE_WAIT = 20.0
#: The submitting and closed phases kill this many seconds (times the point's fraction) after
#: the probe's submission was sent.
SHORT_DELAY = 0.01  # times the fraction (< 0.8): 0..8 ms
#: Seconds a hop takes to forward a round, if its /status does not say.
FORWARD_GUESS = 0.05
#: Seconds a restarted node may take to answer /healthz.
START_WAIT = 30.0

log = logging.getLogger("chaos")


class ChaosError(RuntimeError):
    """The chain could not be set up or a node misbehaved outside a kill point."""


# --------------------------------------------------------------------------- HTTP helpers


def free_ports(count: int) -> list[int]:
    """Ports the OS hands out for port 0 right now (bound moments later by the nodes)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def get_json(
    port: int, path: str, timeout: float = 1.0, tls: ssl.SSLContext | None = None
) -> object:
    """GET a node's JSON route (over HTTPS, trusting ``tls``'s CA, when the chain is TLS)."""
    url = f"{'https' if tls else 'http'}://{HOST}:{port}{path}"
    with urllib.request.urlopen(url, timeout=timeout, context=tls) as response:  # loopback
        data: object = json.loads(response.read())
        return data


def healthy(port: int, tls: ssl.SSLContext | None = None) -> bool:
    url = f"{'https' if tls else 'http'}://{HOST}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=1.0, context=tls) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


# --------------------------------------------------------------------------- the chain


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA made for this chain and a certificate it issued for 127.0.0.1, written to
    ``directory`` as ``ca.pem``, ``cert.pem`` and ``key.pem`` (trustme, a test dependency).

    :raises ChaosError: trustme is not installed.
    """
    try:
        import trustme
    except ImportError:
        raise ChaosError("--tls needs trustme (pip install -e '.[test]')") from None
    ca = trustme.CA()
    issued = ca.issue_cert(HOST)
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    issued.cert_chain_pems[0].write_to_path(str(paths[1]))
    issued.private_key_pem.write_to_path(str(paths[2]))
    return paths


def bad_payload_box(net: ChainClient, info: RoundInfo, shape: Shape) -> bytes:
    """A submission box for ``info``'s round whose first ``shape.bad_shares`` shares are not
    reduced mod N (all ones): every layer opens, and the last mix's validator refuses those
    payloads (more than one ``accused`` reply carries: the trace goes in pages)."""
    width = len(encode_share(0, shape.modulus))
    bad = min(shape.bad_shares, shape.messages)
    payloads = [b"\xff" * width] * bad + [encode_share(0, shape.modulus)] * (shape.messages - bad)
    return net.mixnet.wrap(payloads, info)


def twins_box(net: ChainClient, info: RoundInfo, shape: Shape, hop: int = 1) -> bytes:
    """A submission box for ``info``'s round whose first two inner onions differ in every
    layer up to mix ``hop`` (1: mix 2; below the last mix) and hold one onion after it: mix
    ``hop`` peels both to the same onion, leaves them out and accuses both inputs
    (``duplicate``)."""
    chain_id, r, keys = net.chain.config.chain_id, info.round_id, info.public_keys
    share = encode_share(0, shape.modulus)
    items = [
        wrap(share, keys[1:], chain_id=chain_id, round_id=r, first_hop=1)
        for _ in range(shape.messages)
    ]
    twin = wrap(share, keys[hop + 1 :], chain_id=chain_id, round_id=r, first_hop=hop + 1)
    for i in (0, 1):  # fresh ephemeral keys: the two differ in every layer around the twin
        items[i] = wrap(twin, keys[1 : hop + 1], chain_id=chain_id, round_id=r, first_hop=1)
    return seal_layer(b"".join(items), keys[0], chain_id=chain_id, round_id=r, hop_index=0)


def poisoned_box(net: ChainClient, info: RoundInfo, hop: int, shape: Shape) -> bytes:
    """A submission box for ``info``'s round whose first inner onion is random bytes at mix
    ``hop`` (1: mix 2, up to the last mix; under valid layers before it); its other onions
    carry zero shares. On a chain with ownership proofs that mix proves it cannot be peeled
    (``no-owner``) and the trace excludes the whole submission."""
    chain_id, r, keys = net.chain.config.chain_id, info.round_id, info.public_keys
    width = net.chain.payload_length
    items = [
        wrap(encode_share(0, shape.modulus), keys[1:], chain_id=chain_id, round_id=r,
             first_hop=1, proven=True)
        for _ in range(shape.messages)
    ]  # fmt: skip
    bad = os.urandom(onion_length(width, len(keys) - hop, proven=True))
    if hop > 1:
        bad = wrap(bad, keys[1:hop], chain_id=chain_id, round_id=r, first_hop=1, proven=True)
    items[0] = bad
    return seal_layer(b"".join(items), keys[0], chain_id=chain_id, round_id=r, hop_index=0)


@dataclass(frozen=True)
class Shape:
    """The rounds every chain of the run carries."""

    users: int
    messages: int
    chunk_size: int
    #: one poisoned submission per round (``--poison``): a garbage ``layer`` (on a chain with
    #: ownership proofs), a ``payload`` the validator refuses, or ``twins`` (two onions that
    #: collide at a mix between the first and the last); ``None``: none
    poison: str | None = None
    #: every node serves wss:// (and HTTPS) with a certificate of a CA made for the chain
    tls: bool = False
    #: mixes of the chain (:data:`MIX_COUNTS`)
    mixes: int = 3
    #: with ``poison``: ``min_users = users``, so excluding the poisoner aborts every round
    #: after its trace (``--abort``)
    abort: bool = False
    #: with ``poison == "payload"``: how many of the poisoner's shares the validator refuses
    bad_shares: int = 1

    @property
    def mix_names(self) -> tuple[str, ...]:
        return mix_names(self.mixes)

    @property
    def nodes(self) -> tuple[str, ...]:
        return node_names(self.mixes)

    @property
    def window(self) -> int:
        """Consecutive points whose users have distinct digits (1..:data:`WINDOW`)."""
        return max(1, min(WINDOW, MAX_SLOTS // self.users))

    @property
    def slots(self) -> int:
        """Distinct base-4 digits: one per user of :attr:`window` consecutive points."""
        return self.window * self.users

    @property
    def precision(self) -> int:
        """k = 4**slots, so that every value 4**slot is below k."""
        return int(4**self.slots)

    @property
    def modulus(self) -> int:
        """An odd N > 3·users·k (Algorithm 2), far above any sum of distinct values."""
        return 6 * self.users * self.precision + 1

    def params(self) -> CloakParams:
        return CloakParams(
            modulus=self.modulus,
            precision=self.precision,
            messages=self.messages,
            max_users=self.users,
            mode="sum-preserving",
        )


class Processes:
    """Every node process this run started (across chains); :meth:`stop_all` ends them."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, command: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
        with log_path.open("ab") as out:
            proc = subprocess.Popen(  # our own interpreter and module
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):  # one that outlives SIGKILL
            stop_processes(self.started, 10)
        self.started = [p for p in self.started if p.poll() is None]


class Chain:
    """One chain directory and its four node processes."""

    def __init__(self, directory: Path, shape: Shape, processes: Processes) -> None:
        self.directory = directory
        self.shape = shape
        self.processes = processes
        self.mixes, self.nodes = shape.mix_names, shape.nodes
        keys = generate_node_keys(directory, self.mixes)
        ports = free_ports(len(self.nodes))
        self.ports = dict(zip(self.nodes, ports, strict=True))
        #: what the driver's own connections trust (``None``: plain ws:// and HTTP)
        self.client_tls: ssl.SSLContext | None = None
        tls_config, serve_with = None, []
        if shape.tls:
            ca, cert, key = make_certificates(directory)
            tls_config, self.client_tls = TlsConfig(ca), client_context(ca)
            serve_with = ["--tls-cert", str(cert), "--tls-key", str(key)]
        policy = RoundPolicy(  # a round closes at max_users; the poisoner's exclusion leaves
            # one fewer, which must still do (with --abort: must not)
            min_users=shape.users - bool(shape.poison) + bool(shape.abort),
            max_users=shape.users,
            deadline_seconds=3600.0,
            below_min="wait",
            chunk_size=shape.chunk_size,
        )
        config = ChainConfig(
            chain_id="chaos",
            mixes=tuple(NodeInfo(n, self.url(n), keys[n]) for n in self.mixes),
            sink=NodeInfo(ANALYZER, self.url(ANALYZER), None),
            policy=policy,
            sections={},
            sink_table=SINK_TABLE,
            ownership_proofs=shape.poison == "layer",
            tls=tls_config,
        )
        self.chain_path = directory / "chain.toml"
        write_chain_file(self.chain_path, config, shape.params())
        self.commands: dict[str, list[str]] = {}
        for name in self.nodes:
            command = [
                sys.executable, "-m", "cloaknet", "node",
                "--chain", str(self.chain_path),
                "--name", name,
                "--db", str(directory / f"{name}.db"),
            ]
            if name != ANALYZER:
                command += ["--key", str(directory / f"{name}.key")]
            self.commands[name] = command + serve_with
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def url(self, name: str) -> str:
        return f"{'wss' if self.shape.tls else 'ws'}://{HOST}:{self.ports[name]}"

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def start(self, name: str) -> None:
        self.procs[name] = self.processes.spawn(self.commands[name], self.log_path(name))

    def start_all(self) -> None:
        for name in reversed(self.nodes):  # the analyzer first: each node's successor is up
            self.start(name)
        self.wait_healthy(self.nodes, START_WAIT)

    def wait_healthy(self, names: Sequence[str], timeout: float) -> None:
        limit = time.monotonic() + timeout
        waiting = list(names)
        while waiting:
            self.check_alive()
            waiting = [n for n in waiting if not healthy(self.ports[n], self.client_tls)]
            if waiting and time.monotonic() > limit:
                raise ChaosError(f"{', '.join(waiting)} did not answer /healthz in {timeout:.0f} s")
            if waiting:
                time.sleep(0.02)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ChaosError(
                    f"node {name} exited with code {proc.returncode}; log tail:\n"
                    + self.log_tail(name, 1500)
                )

    def kill(self, name: str) -> None:
        """SIGKILL the node (no clean shutdown) and reap it."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self, name: str) -> None:
        """Start the node again with the same command and database."""
        with self.log_path(name).open("ab") as out:
            out.write(f"----- chaos: {name} restarted after SIGKILL -----\n".encode())
        self.start(name)

    def status(self, name: str) -> dict[str, Any] | None:
        try:
            data = get_json(self.ports[name], "/status", tls=self.client_tls)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def round_status(self, name: str, round_id: int) -> str | None:
        """The round's status at the node; ``None`` if it does not know the round,
        ``"down"`` if it does not answer."""
        data = self.status(name)
        if data is None:
            return "down"
        for info in data.get("rounds", []):
            if isinstance(info, dict) and info.get("round") == round_id:
                value = info.get("status")
                return str(value) if value is not None else None
        return None

    def open_round(self) -> tuple[int, int] | None:
        """The entry mix's open round and its accepted submissions, if one is open."""
        data = self.status(self.mixes[0])
        current = None if data is None else data.get("current_round")
        if not isinstance(current, dict):
            return None
        return int(current["round"]), int(current["clients"])

    def stored_state(self, name: str, round_id: int) -> str:
        """What the (killed) node's database holds about the round, read from a copy of its
        files (the node's own files are not touched): the round's status and how far its
        intake or forwarding got."""
        db = self.directory / f"{name}.db"
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / db.name
            for suffix in ("", "-wal"):
                source = Path(f"{db}{suffix}")
                if source.exists():
                    shutil.copyfile(source, Path(f"{copy}{suffix}"))
            try:
                return _describe_round(copy, round_id)
            except sqlite3.Error as exc:
                return f"unreadable ({exc})"

    def log_tail(self, name: str, chars: int) -> str:
        try:
            return self.log_path(name).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def log_lines(self, name: str, words: Sequence[str]) -> list[str]:
        """Lines of the node's log that mention any of ``words`` (warnings, errors)."""
        try:
            text = self.log_path(name).read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(w in line for w in words)]


def _describe_round(path: Path, round_id: int) -> str:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT status FROM rounds WHERE round_id = ?", (round_id,)).fetchone()
        if row is None:
            return "no round"
        parts = [str(row[0])]

        def one(sql: str) -> tuple[Any, ...]:
            found = conn.execute(sql, (round_id,)).fetchone()
            return tuple(found) if found is not None else ()

        (subs,) = one("SELECT count(*) FROM submissions WHERE round_id = ?")
        (receipts,) = one("SELECT count(*) FROM receipts WHERE round_id = ?")
        if subs or receipts:
            parts.append(f"{max(subs, receipts)} subs")
        chunks, total = one("SELECT count(*), max(chunks) FROM chunks WHERE round_id = ?")
        if chunks:
            parts.append(f"{chunks}/{total} in")
        out, acked = one(
            "SELECT count(*), coalesce(sum(acked), 0) FROM outbound_chunks WHERE round_id = ?"
        )
        if out:
            parts.append(f"{acked}/{out} acked")
        (results,) = one("SELECT count(*) FROM results WHERE round_id = ?")
        if results:
            parts.append("result")
        return " ".join(parts)
    finally:
        conn.close()


# --------------------------------------------------------------------------- kill points


@dataclass
class Point:
    """One kill point: what was planned, what happened, and the verdict."""

    index: int
    node: str
    phase: str
    fraction: float
    delay: float = 0.0
    target: str = ""
    #: with ``--pairs``, the node killed with the target (the next in the chain)
    also: str = ""
    round: int | None = None
    observed: str = ""
    late: bool = False
    stored: str = ""
    recovered: bool = False
    lost: int = 0
    doubled: int = 0
    resent: int = 0
    acknowledged: int = 0
    fillers: int = 0
    rounds: list[int] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    recovery_seconds: float | None = None
    directory: str | None = None
    log_warnings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def status_text(self) -> str:
        return self.observed + (" (late)" if self.late else "")


def schedule(points: int, seed: int, mixes: int = 3) -> list[Point]:
    """Point i kills the chain's node i modulo the number of nodes (its mixes in order, then
    the analyzer); its phase is the next of a seeded shuffle of that node's kind's phases
    (reshuffled when used up); a seeded fraction in [0, 0.8) places the kill within the
    phase (see :meth:`Driver._kill_in_phase`)."""
    rng = random.Random(seed)
    nodes = node_names(mixes)
    decks: dict[str, list[str]] = {name: [] for name in nodes}
    out: list[Point] = []
    for i in range(points):
        name = nodes[i % len(nodes)]
        kind = kind_of(name, mixes)
        if not decks[name]:
            decks[name] = list(PHASES[kind])
            rng.shuffle(decks[name])
        phase = decks[name].pop()
        out.append(Point(i + 1, kind, phase, round(rng.uniform(0.0, 0.8), 3), target=name))
    return out


class ResendCounter(logging.Handler):
    """Counts the client library's resends of ``submit`` frames (its link logs each retry)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if (
            isinstance(args, tuple)
            and len(args) >= 2
            and args[1] == "submit"
            and "retrying" in record.msg
        ):
            self.count += 1


@dataclass
class Submitted:
    """An acknowledged submission: its slot (``None`` for a zero-valued filler) and round."""

    client: str
    slot: int | None
    round: int


class Driver:
    """Runs the kill points against a chain, replacing the chain after a failed point."""

    def __init__(self, args: argparse.Namespace, shape: Shape, processes: Processes) -> None:
        self.args = args
        self.shape = shape
        self.processes = processes
        self.base = Path(tempfile.mkdtemp(prefix="cloaknet-chaos-"))
        self.chains = 0
        self.chain = self.new_chain()
        self.resends = ResendCounter()
        link_log = logging.getLogger("mixnet.link")
        link_log.setLevel(logging.INFO)
        link_log.addHandler(self.resends)
        link_log.propagate = False

    def new_chain(self) -> Chain:
        self.chains += 1
        directory = self.base / f"chain{self.chains}"
        directory.mkdir(mode=0o700)
        chain = Chain(directory, self.shape, self.processes)
        chain.start_all()
        return chain

    def replace_chain(self) -> None:
        """Stop the current chain's processes (its directory is kept) and start a new one."""
        self.processes.stop_all()
        self.chain = self.new_chain()

    # ------------------------------------------------------------------ values

    def shares(self, value: int) -> list[int]:
        """m shares, the first m−1 uniform mod N, adding up to ``value`` mod N."""
        n, m = self.shape.modulus, self.shape.messages
        head = [secrets.randbelow(n) for _ in range(m - 1)]
        return [*head, (value - sum(head)) % n]

    def slots_of(self, point: Point) -> list[int]:
        users = self.shape.users
        first = ((point.index - 1) % self.shape.window) * users
        return list(range(first, first + users))

    # ------------------------------------------------------------------ one point

    async def run_point(self, point: Point) -> None:
        started = time.monotonic()
        point.directory = str(self.chain.directory)
        resent_before = self.resends.count
        stop = threading.Event()
        try:
            await asyncio.wait_for(self._run_point(point, stop), timeout=self.args.point_timeout)
        except TimeoutError:
            point.error = f"timed out after {self.args.point_timeout:.0f} s" + (
                f" ({point.checks[-1]})" if point.checks else ""
            )
        except Exception as exc:  # every failure of a point is reported, none ends the run
            point.error = f"{type(exc).__name__}: {exc}"
        finally:
            stop.set()
            point.resent += self.resends.count - resent_before
            point.seconds = round(time.monotonic() - started, 3)
        if point.error is None:
            try:
                self.chain.check_alive()
            except ChaosError as exc:
                point.error = str(exc)
        point.recovered = point.error is None and point.lost == 0 and point.doubled == 0
        for name in self.chain.nodes:
            lines = self.chain.log_lines(name, (" ERROR ", " CRITICAL ", "Traceback"))
            if lines:
                point.log_warnings[name] = lines[-20:]
        if not point.recovered:
            for name in self.chain.nodes:
                point.log_warnings.setdefault(name, [])
                point.log_warnings[name] += [
                    "--- tail ---",
                    *self.chain.log_tail(name, 2500).splitlines(),
                ]
            self.replace_chain()

    async def _run_point(self, point: Point, stop: threading.Event) -> None:
        chain, shape = self.chain, self.shape
        slots = self.slots_of(point)
        probe_slot, user_slots = slots[0], slots[1:]
        if shape.poison:  # the poisoner takes the last user's place in the round
            user_slots = user_slots[:-1]
        pending: list[asyncio.Future[Any]] = []
        async with connect(
            chain.chain_path, connections=4, retry_for=self.args.point_timeout
        ) as net:
            info = await net.mixnet.current_round(refresh=True)
            point.round = round_id = info.round_id
            point.checks.append(f"round {round_id} open")
            if shape.poison:
                await self._send_poison(point, net, info)
            probe_id = f"p{point.index}-probe"
            payloads = [encode_share(y, shape.modulus) for y in self.shares(4**probe_slot)]
            box = await asyncio.to_thread(net.mixnet.wrap, payloads, info)
            probe_frame: dict[str, object] = {
                "type": "submit", "round": round_id, "client": probe_id, "box": box,
            }
            if point.index % 2:  # every other point the probe comes in a submit-many frame
                del probe_frame["type"]
                probe_frame = {"type": "submit-many", "submissions": [probe_frame]}
            raw = await ws_connect(
                chain.url(chain.mixes[0]), compression=None, max_size=MAX_REPLY, proxy=None,
                ssl=chain.client_tls,
            )
            try:
                users, killed_at = await self._submit_and_kill(
                    point, net, raw, probe_frame, user_slots, pending, stop
                )
            finally:
                with contextlib.suppress(Exception):
                    await raw.close()
            try:
                await self._finish_point(
                    point, net, probe_frame, probe_slot, users, slots, killed_at
                )
            finally:
                for task in pending:
                    task.cancel()

    async def _send_poison(self, point: Point, net: ChainClient, info: RoundInfo) -> None:
        """The poisoner's submission into the point's round (acknowledged before any user's):
        its first inner onion is garbage at a mix after the first (:func:`poisoned_box`; the
        hop per point is :meth:`_turn`'s), its first share a payload the validator refuses
        (:func:`bad_payload_box`), or its first two onions collide at a mix between the first
        and the last (:func:`twins_box`; likewise)."""
        if self.shape.poison == "payload":
            bad = self.shape.bad_shares
            what = "a share that is" if bad == 1 else f"{bad} shares that are"
            point.checks.append(f"poisoner submits {what} not reduced mod N")
            box = await asyncio.to_thread(bad_payload_box, net, info, self.shape)
        elif self.shape.poison == "twins":  # at each mix between the first and the last
            hop = 1 + self._turn(point, self.shape.mixes - 2)
            point.checks.append(f"poisoner submits two onions that collide at hop {hop}")
            box = await asyncio.to_thread(twins_box, net, info, self.shape, hop)
        else:
            hop = 1 + self._turn(point, self.shape.mixes - 1)
            point.checks.append(f"poisoner submits garbage for hop {hop}")
            box = await asyncio.to_thread(poisoned_box, net, info, hop, self.shape)
        frame = {"type": "submit", "round": info.round_id, "client": f"p{point.index}-poison",
                 "box": box}  # fmt: skip
        chain = self.chain
        link = Link(chain.url(chain.mixes[0]), max_size=MAX_REPLY, name="chaos-poisoner",
                    retry_for=self.args.point_timeout, ssl_context=chain.client_tls)  # fmt: skip
        try:
            reply = await link.request(frame, expect="accepted")
        finally:
            await link.close()
        if reply.get("round") != info.round_id:
            raise ChaosError(f"the poisoner was acknowledged as {reply!r}")

    async def _ended(self, name: str, round_id: int, wait: float = 10.0) -> str | None:
        """Node ``name``'s status of the round once it ended there (the entry mix hears the
        chain's answer a moment after the analyzer published the result), or its last status
        after ``wait`` seconds."""
        limit = time.monotonic() + wait
        while True:
            status = await asyncio.to_thread(self.chain.round_status, name, round_id)
            if status in ("aborted", "confirmed") or time.monotonic() > limit:
                return status
            await asyncio.sleep(0.05)

    async def _mixes_ended(self, round_id: int, expected: str) -> list[str]:
        """Problems: a mix that did not end the round ``expected``, as the analyzer did (a
        mix erases the round's key and intake when it ends it)."""
        problems = []
        for name in self.chain.mixes:
            status = await self._ended(name, round_id)
            if status != expected:
                problems.append(f"round {round_id}: {expected} at the analyzer, {status} at {name}")
        return problems

    async def _probe_afresh(
        self, net: ChainClient, probe_id: str, probe_slot: int
    ) -> dict[str, object]:
        """(``--abort``) The probe's value submitted afresh into the open round, as a client
        told ``round-closed`` does: its acknowledgement."""
        receipt = await net.submit_shares(self.shares(4**probe_slot), client_id=probe_id)
        return {"type": "accepted", "round": receipt.round, "client": receipt.client}

    def _turn(self, point: Point, choices: int) -> int:
        """Which of ``choices`` (e.g. hops) the point takes: the next one at each point, and
        one further at each turn of the schedule's targets, so that every node is killed
        with each choice in turn."""
        index, turn = point.index - 1, (point.index - 1) // len(self.shape.nodes)
        return (index + turn) % choices

    async def _finish_point(
        self,
        point: Point,
        net: ChainClient,
        probe_frame: Mapping[str, object],
        probe_slot: int,
        users: asyncio.Future[list[Submitted]],
        slots: Sequence[int],
        killed_at: float,
    ) -> None:
        """After the kill and restart: the probe's resend, the users' acknowledgements,
        fillers, and the check of every round's result."""
        chain = self.chain
        round_id = point.round
        many = probe_frame["type"] == "submit-many"
        sent = probe_frame["submissions"][0] if many else probe_frame  # type: ignore[index]
        probe_id = str(sent["client"])
        acked: list[Submitted] = []
        # the probe never read its reply: resend the identical frame, as the library does
        point.checks.append("probe resends its submission")
        link = Link(
            chain.url(chain.mixes[0]),
            max_size=MAX_REPLY,
            name="chaos-probe",
            retry_for=self.args.point_timeout,
            ssl_context=chain.client_tls,
        )
        try:
            reply = await link.request(probe_frame, expect="receipts" if many else "accepted")
        except RoundClosed:
            if not self.shape.abort:
                raise
            reply = {"type": "error", "code": RoundClosed.code}
        finally:
            await link.close()
        if many:  # the one receipt must be the probe's acknowledgement
            results = reply.get("results")
            if not isinstance(results, list) or len(results) != 1 or not isinstance(
                results[0], dict
            ):
                raise ChaosError(f"the probe's submit-many got {reply!r}")
            reply = results[0]
        point.resent += 1
        if self.shape.abort and reply.get("code") == RoundClosed.code:
            # the round was aborted first: its receipts are gone, the probe submits afresh
            point.checks.append(f"probe's resend refused: round {round_id} was aborted")
            reply = await self._probe_afresh(net, probe_id, probe_slot)
        if reply.get("type") != "accepted":
            raise ChaosError(f"the probe's resent submission was refused: {reply!r}")
        probe_round = get_int(reply, "round", min_value=0)
        if (probe_round != round_id and not self.shape.abort) or reply.get("client") != probe_id:
            point.checks.append(f"probe acknowledged as {reply!r}, sent to round {round_id}")
            raise ChaosError(
                f"the probe's exact resend was acknowledged for round {probe_round}, "
                f"not {round_id}"
            )
        acked.append(Submitted(probe_id, probe_slot, probe_round))
        point.checks.append("waiting for the users' acknowledgements")
        acked += await users
        point.acknowledged = len(acked)
        await self._fill_open_rounds(point, net, acked)
        await self._check_results(point, net, acked, slots)
        point.recovery_seconds = round(time.monotonic() - killed_at, 3)

    async def _submit_and_kill(
        self,
        point: Point,
        net: ChainClient,
        raw: ClientConnection,
        probe_frame: Mapping[str, object],
        user_slots: Sequence[int],
        pending: list[asyncio.Future[Any]],
        stop: threading.Event,
    ) -> tuple[asyncio.Future[list[Submitted]], float]:
        """Start the users, send the probe, kill the target in the point's phase and restart
        it; returns the future of the users' acknowledgements and the time of the kill."""
        chain = self.chain
        done: list[Submitted] = []

        async def user(slot: int, wait: float) -> Submitted:
            await asyncio.sleep(wait)
            client = f"p{point.index}-u{slot}"
            receipt: Receipt = await net.submit_shares(self.shares(4**slot), client_id=client)
            sub = Submitted(client, slot, receipt.round)
            done.append(sub)
            return sub

        def start_users(stagger: float) -> asyncio.Future[list[Submitted]]:
            tasks = [
                asyncio.ensure_future(user(s, i * stagger)) for i, s in enumerate(user_slots)
            ]
            pending.extend(tasks)
            return asyncio.gather(*tasks)

        round_id = point.round
        assert round_id is not None
        target = point.target
        if point.phase == "submitting":
            users = start_users(self.args.stagger)
            point.checks.append("waiting for half the users")
            while len(done) < len(user_slots) // 2 and not users.done():
                await asyncio.sleep(0.002)
            if users.done():
                users.result()  # raises a user's error
            observed = await asyncio.to_thread(chain.round_status, target, round_id)
            point.observed = observed or "-"
            await raw.send(encode_frame(probe_frame))
            point.delay = round(point.fraction * SHORT_DELAY, 4)
            await asyncio.sleep(point.delay)
            await asyncio.to_thread(self.kill, point)
        elif point.phase == "closed":
            users = start_users(0.0)
            point.checks.append("waiting for every user but the probe")
            await asyncio.shield(users)
            await raw.send(encode_frame(probe_frame))  # the submission that closes the round
            point.delay = round(point.fraction * SHORT_DELAY, 4)
            await asyncio.sleep(point.delay)  # by timing: no status query delays the kill
            await asyncio.to_thread(self.kill, point)
            point.observed = "-"
        else:
            await raw.send(encode_frame(probe_frame))
            users = start_users(0.0)
            point.checks.append(f"waiting for phase {point.phase}")
            point.observed, point.late = await asyncio.to_thread(
                self._kill_in_phase, point, round_id, stop
            )
        killed_at = time.monotonic()
        point.stored = await asyncio.to_thread(chain.stored_state, target, round_id)
        killed = [target, *([point.also] if point.also else [])]
        point.checks.append(
            f"{' and '.join(killed)} killed (status {point.status_text}, stored "
            f"{point.stored}); restarting"
        )
        for name in killed:
            chain.restart(name)
        await asyncio.to_thread(chain.wait_healthy, killed, START_WAIT)
        point.checks.append(f"{' and '.join(killed)} healthy again")
        return users, killed_at

    def kill(self, point: Point) -> None:
        """SIGKILL the point's target and, with ``--pairs``, the next node in the chain (the
        analyzer's: the entry mix) at once, as a host running both would go down."""
        self.chain.kill(point.target)
        if self.args.pairs:
            nodes = self.chain.nodes
            point.also = nodes[(nodes.index(point.target) + 1) % len(nodes)]
            self.chain.kill(point.also)

    def forward_seconds(self, sender: str) -> float:
        """How long ``sender`` takes to forward a round undisturbed: the shortest
        ``forward_seconds`` of the rounds its /status lists (a kill downstream stretches some),
        or :data:`FORWARD_GUESS` if it lists none (e.g. just restarted)."""
        data = self.chain.status(sender)
        rounds = [] if data is None else data.get("rounds", [])
        times = [
            float(info["forward_seconds"])
            for info in (rounds if isinstance(rounds, list) else [])
            if isinstance(info, dict) and isinstance(info.get("forward_seconds"), float)
        ]
        return min(times) if times else FORWARD_GUESS

    def _kill_in_phase(
        self, point: Point, round_id: int, stop: threading.Event
    ) -> tuple[str, bool]:
        """Poll /status until the point's phase, then SIGKILL the target (in a thread).
        Returns the target's round status at the kill and whether the phase was missed."""
        chain, target, phase = self.chain, point.target, point.phase
        if phase == "forwarding":  # the target mix (for the analyzer: the last mix's
            sender = target if target != ANALYZER else chain.mixes[-2]  # predecessor) forwards
            names = sorted({target, sender})
        elif phase == "receiving":  # the target's predecessor forwards to it
            sender = chain.nodes[chain.nodes.index(target) - 1]
            names = sorted({target, sender})
        elif phase == "assembling":  # the last mix forwards to the analyzer
            sender = chain.mixes[-1]
            names = sorted({target, sender, ANALYZER})
        else:
            raise ValueError(f"unknown phase {phase!r}")

        def fire(s: Mapping[str, str | None]) -> bool:
            if s[sender] != "mixed":
                return False
            if phase == "receiving":
                return s[target] == "open"
            if phase == "assembling":
                return s[ANALYZER] in ("open", "closed")
            return True

        def late(s: Mapping[str, str | None]) -> bool:
            if phase == "receiving" and s[target] not in (None, "open"):
                return True
            if phase == "assembling":
                return s[ANALYZER] == "done"
            return s[sender] == "forwarded"

        point.delay = round(point.fraction * self.forward_seconds(sender), 4)
        limit = time.monotonic() + PHASE_WAIT
        missed = False
        while True:
            if stop.is_set():
                raise ChaosError("stopped while waiting for the phase")
            statuses = {n: chain.round_status(n, round_id) for n in names}
            if fire(statuses):
                break
            if late(statuses) or time.monotonic() > limit:
                missed = True
                break
            time.sleep(0.001)
        if point.delay and not missed:
            time.sleep(point.delay)
            statuses = {n: chain.round_status(n, round_id) for n in names}
            missed = late(statuses)
        self.kill(point)
        return statuses[target] or "-", missed

    async def _fill_open_rounds(
        self, point: Point, net: ChainClient, acked: list[Submitted]
    ) -> None:
        """If the entry mix's open round holds submissions (one of ours that spilled into it,
        or anything else), close it with zero-valued fillers so that it is analyzed too."""
        for _ in range(3):
            current = await asyncio.to_thread(self.chain.open_round)
            rounds = {s.round for s in acked}
            if current is None or (current[1] == 0 and current[0] not in rounds):
                return
            round_id, clients = current
            missing = self.shape.users - clients
            point.checks.append(f"filling round {round_id} ({clients} submissions) with {missing}")
            base = point.fillers
            point.fillers += missing
            receipts = await asyncio.gather(
                *(
                    net.submit_shares(self.shares(0), client_id=f"p{point.index}-f{base + i}")
                    for i in range(missing)
                )
            )
            acked += [Submitted(r.client, None, r.round) for r in receipts]
            await asyncio.sleep(0.2)

    async def _check_results(
        self, point: Point, net: ChainClient, acked: list[Submitted], slots: Sequence[int]
    ) -> None:
        """Every round an acknowledged submission went into: its result must be exact."""
        by_round: dict[int, list[Submitted]] = {}
        for sub in acked:
            by_round.setdefault(sub.round, []).append(sub)
        point.rounds = sorted(by_round)
        counted: Counter[int] = Counter()
        problems: list[str] = []
        aborted: set[int] = set()
        for round_id in point.rounds:
            point.checks.append(f"waiting for the result of round {round_id}")
            subs = by_round[round_id]
            must_abort = self.shape.abort and round_id == point.round
            try:
                result = await net.result(round_id)
            except RoundAborted as exc:
                point.results[str(round_id)] = {"error": str(exc)}
                if not must_abort:
                    problems.append(f"round {round_id}: {exc}")
                    continue  # its acknowledged submissions stay uncounted: lost
                aborted.add(round_id)  # as it must: its submissions are counted nowhere
                problems += await self._mixes_ended(round_id, "aborted")
                continue
            except RoundFailed as exc:
                point.results[str(round_id)] = {"error": str(exc)}
                problems.append(f"round {round_id}: {exc}")
                continue  # its acknowledged submissions stay uncounted: lost
            raw = result.raw
            point.results[str(round_id)] = {
                k: raw.get(k)
                for k in ("status", "users", "raw_sum", "estimate_exact", "excluded")
            }
            if must_abort:
                problems.append(f"round {round_id} ended {raw.get('status')}, not aborted")
            problems += await self._mixes_ended(round_id, "confirmed")
            poisoned = int(bool(self.shape.poison) and round_id == point.round)
            if raw.get("excluded", 0) != poisoned:
                problems.append(
                    f"round {round_id}: {raw.get('excluded', 0)} submissions excluded, "
                    f"expected {poisoned}"
                )
            total = int(str(raw.get("raw_sum")))
            expected = sum(4**s.slot for s in subs if s.slot is not None)
            if result.users != len(subs):
                problems.append(
                    f"round {round_id}: the analyzer counted {result.users} users, "
                    f"the entry mix acknowledged {len(subs)}"
                )
            if total != expected:
                problems.append(f"round {round_id}: raw sum {total}, expected {expected}")
            exact = raw.get("estimate_exact")
            if Fraction(str(exact)) != Fraction(expected, self.shape.precision):
                problems.append(f"round {round_id}: estimate {exact}, expected {expected}/k")
            if total >= 4**self.shape.slots:
                problems.append(f"round {round_id}: raw sum beyond every digit (carry)")
            digit = 0
            while total:
                total, count = divmod(total, 4)
                if count:
                    counted[digit] += count
                digit += 1
        # acknowledged into a round that must abort (``--abort``): counted nowhere
        mine = {s.slot for s in acked if s.slot is not None and s.round not in aborted}
        point.lost = sum(1 for slot in mine if counted[slot] == 0)
        point.doubled = sum(
            max(0, count - 1) if slot in mine else count for slot, count in counted.items()
        )
        foreign = sorted(slot for slot in counted if slot not in slots)
        if foreign:
            problems.append(f"values of other points counted here: slots {foreign}")
        if problems:
            point.checks += problems
            raise ChaosError("; ".join(problems))


# --------------------------------------------------------------------------- report


def print_table(points: Sequence[Point], console: Console) -> None:
    table = Table(title="chaos: SIGKILL a node at a round phase, restart it")
    for name, justify in (
        ("point", "right"), ("node", "left"), ("phase", "left"), ("status", "left"),
        ("stored at kill", "left"),
        ("round", "right"), ("recovered", "left"), ("lost", "right"), ("doubled", "right"),
        ("resent", "right"), ("seconds", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for p in points:
        table.add_row(
            str(p.index),
            f"{p.node} ({p.target}{' + ' + p.also if p.also else ''})",
            p.phase,
            p.status_text,
            p.stored,
            "-" if p.round is None else str(p.round),
            "yes" if p.recovered else "NO",
            str(p.lost),
            str(p.doubled),
            str(p.resent),
            f"{p.seconds:.1f}",
        )
    console.print(table)
    for p in points:
        if not p.recovered:
            console.print(f"point {p.index} failed: {p.error or 'inexact result'}")
            console.print(f"  directory: {p.directory}")
            for line in p.checks[-6:]:
                console.print(f"  {line}")


def summary_line(points: Sequence[Point], planned: int) -> str:
    recovered = sum(1 for p in points if p.recovered)
    lost = sum(p.lost for p in points)
    doubled = sum(p.doubled for p in points)
    return f"{recovered} of {planned} recovered, {lost} lost, {doubled} doubled"


async def drive(driver: Driver, plan: Sequence[Point], time_limit: float) -> list[Point]:
    done: list[Point] = []
    stop_at = time.monotonic() + time_limit
    broken: str | None = None
    for point in plan:
        if broken is None and time.monotonic() >= stop_at:
            broken = f"not run: the run's time limit ({time_limit:.0f} s) was reached"
        if broken is not None:
            point.error = broken
            done.append(point)
            continue
        try:
            await driver.run_point(point)
        except ChaosError as exc:  # a fresh chain could not be started
            broken = f"not run: {exc}"
        done.append(point)
        if not driver.args.quiet:
            mark = "recovered" if point.recovered else f"FAILED: {point.error}"
            print(
                f"point {point.index:>3}: {point.node:<8} {point.phase:<11} "
                f"{point.status_text:<16} {mark} ({point.seconds:.1f} s)",
                file=sys.stderr,
            )
    return done


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--points", type=int, default=30, help="kill points (default 30)")
    p.add_argument("--seed", type=int, default=1, help="seed of the schedule (default 1)")
    p.add_argument("--users", type=int, default=8, help="users per round (default 8)")
    p.add_argument("--messages", type=int, default=8, help="shares per user, >= 4 (default 8)")
    p.add_argument(
        "--chunk-size", type=int, default=1, help="payloads per batch chunk (default 1)"
    )
    p.add_argument(
        "--stagger", type=float, default=0.02,
        help="seconds between users' starts in the submitting phase (default 0.02)",
    )
    p.add_argument(
        "--point-timeout", type=float, default=60.0, help="seconds per point (default 60)"
    )
    p.add_argument(
        "--time-limit", type=float, default=900.0,
        help="seconds for the whole run; later points are not run (default 900)",
    )
    p.add_argument(
        "--poison", choices=("layer", "payload", "twins"), default=None,
        help="one poisoned submission per round that the trace must exclude: a garbage "
        "layer (the chain then has ownership proofs), a payload the validator refuses, or "
        "two onions that collide at a mix between the first and the last (see the module "
        "docstring)",
    )
    p.add_argument(
        "--tls", action="store_true",
        help="every node serves wss:// and HTTPS, with a certificate of a CA made for the "
        "chain (needs trustme, a test dependency)",
    )
    p.add_argument(
        "--pairs", action="store_true",
        help="kill the target and the next node in the chain at once (the analyzer's: the "
        "entry mix), as when a host running both goes down, and restart both",
    )
    p.add_argument(
        "--abort", action="store_true",
        help="with --poison: min_users = users, so that excluding the poisoner aborts every "
        "round after its trace; the round must end aborted at the entry mix as at the "
        "analyzer and count none of its values (a resent probe refused round-closed "
        "submits afresh)",
    )
    p.add_argument(
        "--mixes", type=int, default=3,
        help=f"mixes in the chain, {MIX_COUNTS.start}..{MIX_COUNTS.stop - 1} (default 3); "
        "the points kill every mix in turn, then the analyzer",
    )
    p.add_argument(
        "--bad-shares", type=int, default=1,
        help="with --poison payload: how many of the poisoner's shares the validator refuses "
        "(default 1; more than one reply's accusations, 2 with chunks of 1, make the trace "
        "go in pages)",
    )
    p.add_argument("--json", type=Path, default=None, help="write every detail here")
    p.add_argument("--keep", action="store_true", help="keep the chain directories")
    p.add_argument("--quiet", action="store_true", help="no per-point progress lines")
    args = p.parse_args(argv)
    if args.points < 1:
        p.error("--points must be >= 1")
    if not 2 <= args.users <= MAX_SLOTS:
        p.error(f"--users must be in 2..{MAX_SLOTS}")
    if args.poison and args.users < 3:
        p.error("--poison needs --users >= 3 (the probe, a user and the poisoner)")
    if args.abort and not args.poison:
        p.error("--abort needs --poison (the exclusion is what aborts the round)")
    if args.bad_shares != 1 and args.poison != "payload":
        p.error("--bad-shares needs --poison payload")
    if not 1 <= args.bad_shares <= args.messages:
        p.error("--bad-shares must be in 1..--messages")
    if args.mixes not in MIX_COUNTS:
        p.error(f"--mixes must be in {MIX_COUNTS.start}..{MIX_COUNTS.stop - 1}")
    if args.messages < 4:
        p.error("--messages must be >= 4")
    if not 1 <= args.chunk_size <= 65536:
        p.error("--chunk-size must be in 1..65536")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    shape = Shape(
        args.users, args.messages, args.chunk_size, args.poison, args.tls, args.mixes,
        args.abort, args.bad_shares,
    )
    plan = schedule(args.points, args.seed, args.mixes)
    processes = Processes()
    console = Console(width=150)
    started = time.monotonic()
    driver: Driver | None = None
    points: list[Point] = []
    with sigterm_interrupts():  # SIGTERM as Ctrl-C: every node is stopped
        try:
            driver = Driver(args, shape, processes)
            points = asyncio.run(drive(driver, plan, args.time_limit))
        except ChaosError as exc:
            print(f"chaos: the chain did not start: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted: stopping every node", file=sys.stderr)
            processes.stop_all()
            if driver is not None:
                print(f"chain directories kept in {driver.base}", file=sys.stderr)
            return 130
        finally:
            processes.stop_all()
    seconds = time.monotonic() - started
    ok = len(points) == args.points and all(p.recovered for p in points)
    print_table(points, console)
    line = summary_line(points, args.points)
    console.print(f"{line}  ({seconds:.1f} s)")
    if args.json is not None:
        report = {
            "summary": line,
            "ok": ok,
            "seconds": round(seconds, 3),
            "seed": args.seed,
            "points_planned": args.points,
            "recovered": sum(1 for p in points if p.recovered),
            "lost": sum(p.lost for p in points),
            "doubled": sum(p.doubled for p in points),
            "users": shape.users,
            "messages": shape.messages,
            "chunk_size": shape.chunk_size,
            "mixes": shape.mixes,
            "poison": shape.poison,
            "bad_shares": shape.bad_shares,
            "abort": shape.abort,
            "tls": shape.tls,
            "pairs": args.pairs,
            "modulus": str(shape.modulus),
            "precision": str(shape.precision),
            "directory": str(driver.base) if driver is not None else None,
            "points": [asdict(p) for p in points],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if driver is not None:
        if ok and not args.keep:
            shutil.rmtree(driver.base, ignore_errors=True)
        else:
            console.print(f"chain directories kept in {driver.base}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
