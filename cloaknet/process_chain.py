"""A real local chain of separate OS processes: every mix and the analyzer is its own
``python -m cloaknet node`` process on 127.0.0.1, on ports that were free at start.

:func:`process_chain` writes fresh identity keys and a chain file (with the ``[protocol]``
table it is given) into a directory, starts the analyzer and the mixes, waits until every
node answers ``/healthz``, yields a :class:`ProcessChain`, and stops every process it started
when the block ends — also on an exception, Ctrl-C or a SIGTERM to this process
(:func:`sigterm_interrupts`): SIGTERM, then SIGKILL of the process group of a node that has
not stopped within 10 s. Used by ``cloaknet experiment fl
--network``, ``scripts/bench_fl_round.py`` and the real-chain tests; ``cloaknet demo`` and
``scripts/bench_round.py`` keep their own launchers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cloaknet.chain_init import local_chain
from cloaknet.chainfile import (
    CloakChain,
    load_chain,
    write_chain_file,
)
from cloaknet.errors import CloakError
from mixnet.chain import RoundPolicy

__all__ = [
    "HOST",
    "ChainStartError",
    "ProcessChain",
    "process_chain",
    "sigterm_interrupts",
    "stop_processes",
]

HOST: Final[str] = "127.0.0.1"
#: Seconds a stopping node gets after SIGTERM before its process group is killed.
STOP_SECONDS: Final[float] = 10.0
_LOG_TAIL = 2000


class ChainStartError(CloakError, RuntimeError):
    """A node process exited or did not answer ``/healthz`` in time (the message carries
    the tail of its log)."""


@dataclass
class ProcessChain:
    """A running chain of node processes: ``directory`` (keys, ``chain.toml``, each node's
    database and ``<name>.log``), ``chain_path``, the node ``names`` and ``ports`` in chain
    order (the mixes, then ``analyzer``) and their processes."""

    directory: Path
    chain_path: Path
    names: list[str]
    ports: list[int]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def chain(self) -> CloakChain:
        """The chain file, loaded (what every node and client reads)."""
        return load_chain(self.chain_path)

    @property
    def pids(self) -> dict[str, int]:
        """Each node's process id."""
        return {name: proc.pid for name, proc in self.processes.items()}

    def log_tail(self, name: str) -> str:
        """The last characters of node ``name``'s log."""
        path = self.directory / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-_LOG_TAIL:]
        except OSError as exc:
            return f"(no log: {exc.strerror})"

    def check_alive(self) -> None:
        """:class:`ChainStartError` if a node process has exited."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise ChainStartError(
                    f"node {name} exited with {proc.returncode}:\n{self.log_tail(name)}"
                )

    def status(self, name: str, timeout: float = 2.0) -> dict[str, Any]:
        """Node ``name``'s ``GET /status`` (JSON).

        :raises OSError, ValueError: the node did not answer with JSON.
        """
        port = self.ports[self.names.index(name)]
        url = f"http://{HOST}:{port}/status"
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            data = json.loads(reply.read())
        if not isinstance(data, dict):
            raise ValueError(f"{name}'s /status is not a JSON object")
        return data

    def _start(self, name: str, args: list[str]) -> None:
        with (self.directory / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen(  # noqa: S603 - our interpreter and module
                [sys.executable, "-m", "cloaknet", "node", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _wait_healthy(self, seconds: float) -> None:
        limit = time.monotonic() + seconds
        waiting = list(zip(self.names, self.ports, strict=True))
        while waiting:
            self.check_alive()
            waiting = [(n, p) for n, p in waiting if not _healthy(p)]
            if waiting and time.monotonic() > limit:
                name = waiting[0][0]
                raise ChainStartError(
                    f"node {name} did not answer /healthz within {seconds:g} s:\n"
                    f"{self.log_tail(name)}"
                )
            if waiting:
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop every node process (SIGTERM; SIGKILL to the process group of one still
        running after :data:`STOP_SECONDS`). Idempotent."""
        stop_processes(self.processes.values(), STOP_SECONDS)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], seconds: float) -> None:
    """Stop node processes started in their own sessions: SIGTERM to each still running,
    then SIGKILL to the process group of any still running ``seconds`` later. Idempotent."""
    procs = list(processes)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + seconds
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _healthy(port: int) -> bool:
    try:
        url = f"http://{HOST}:{port}/healthz"
        with urllib.request.urlopen(url, timeout=1.0) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM acts as Ctrl-C (SIGINT) in the main thread, so that
    the ``finally`` blocks that stop the node processes run: a driver stopped by ``kill``, a
    CI timeout or a service manager leaves no node behind (otherwise Python dies of SIGTERM
    at once, and nodes started in their own sessions keep running). Further SIGTERMs are
    ignored until the block ends, so that the clean-up is not cut short (SIGKILL still ends
    the driver); the previous handler is restored after the block. Outside the main thread
    (where no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
        # exactly what Ctrl-C does: inside asyncio.run its main task is cancelled (and
        # KeyboardInterrupt raised once it has unwound), elsewhere KeyboardInterrupt is raised
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def process_chain(
    protocol_table: Mapping[str, Any],
    policy: RoundPolicy,
    *,
    mixes: int = 3,
    directory: Path | None = None,
    chain_id: str = "local",
    startup_seconds: float = 60.0,
    keep: bool = False,
) -> Iterator[ProcessChain]:
    """Run a chain of ``mixes`` mix processes (``mix1`` … ``mixL``) and an ``analyzer``
    process, all on 127.0.0.1, with ``[protocol]`` = ``protocol_table`` and ``[round]`` =
    ``policy``; yield it once every node answers ``/healthz``, and stop every process on
    exit (module doc).

    ``directory`` (created if needed) holds the keys, the chain file, the databases and the
    logs; by default a fresh temporary directory, removed on exit unless ``keep``. The chain
    file is checked (it must load) before any process starts.

    :raises ValueError: ``mixes < 1``.
    :raises ChainFileError: the table or the policy is invalid, or they do not fit.
    :raises ChainStartError: a node exited or did not answer within ``startup_seconds``.
    :raises OSError: the directory or a file cannot be written.
    """
    if mixes < 1:
        raise ValueError(f"mixes must be >= 1, got {mixes}")
    made = directory is None
    folder = Path(tempfile.mkdtemp(prefix="cloaknet-chain-")) if directory is None else directory
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    running: ProcessChain | None = None
    with sigterm_interrupts():  # a SIGTERM to the driver still stops every node
        try:
            local = local_chain(folder, chain_id=chain_id, mixes=mixes, policy=policy, host=HOST)
            names, ports = local.names, local.ports
            chain_path = folder / "chain.toml"
            write_chain_file(chain_path, local.config, protocol_table)
            running = ProcessChain(folder, chain_path, [*names, "analyzer"], ports)
            base = ["--chain", str(chain_path)]
            running._start("analyzer", [*base, "--name", "analyzer"])
            for name in reversed(names):
                running._start(name, [*base, "--name", name, "--key", str(folder / f"{name}.key")])
            running._wait_healthy(startup_seconds)
            yield running
        finally:
            if running is not None:
                running.stop()
            if made and not keep:
                shutil.rmtree(folder, ignore_errors=True)
