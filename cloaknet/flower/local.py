"""Flower's deployment runtime on this machine: one SuperLink and n SuperNodes on 127.0.0.1,
and ``flwr run`` of an app directory — no Ray.

Why this and not ``flwr.simulation.run_simulation``: in Flower 1.42 the Simulation Runtime
always builds ``RayBackend`` (``flwr/server/superlink/fleet/vce/vce_api.py``, whatever
``backend_name`` says), and Ray is only in ``flwr[simulation]``. The deployment runtime needs no
Ray: ``flower-superlink`` serves the Fleet, Control and ServerAppIo APIs over HTTP on one port,
each ``flower-supernode`` pulls its messages from it, and both start ``flower-superexec``,
which runs the ServerApp (``flwr-serverapp``) and every ClientApp message (``flwr-clientapp``)
in subprocesses that load the app from the FAB ``flwr run`` uploads. Runtime installation of
app dependencies (``uv sync``) is off: the app runs in this environment.

:class:`LocalFederation` starts everything in its own working directory (``FLWR_HOME``, logs,
the Flower Configuration naming the SuperLink), each process in a new session so that stopping
it also stops the subprocesses it started, with Flower's telemetry and update check
disabled. Every port is a free 127.0.0.1 port. Processes are stopped with
SIGTERM, then SIGKILL after a grace period, also when the block fails.

Command line (the example app)::

    python -m cloaknet.flower.local examples/flower --supernodes 4 \\
        --run-config 'privacy="none"' --run-config 'num-server-rounds=3'

A SuperNode polls the SuperLink every 3 s when idle, and so does the ServerApp, so each
training round takes a few seconds whatever the model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import tomli_w

__all__ = ["ConfigValue", "FlowerRun", "LocalFederation", "free_port", "main"]

#: The connection name written into the Flower Configuration.
CONNECTION: Final[str] = "cloaknet-local"
#: Environment that keeps Flower from contacting anything off this machine (and polls faster).
QUIET_ENV: Final[dict[str, str]] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "PYTHONUNBUFFERED": "1",
    # SuperExec looks for new ServerApp/ClientApp tasks every second by default
    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1",
}

ConfigValue = bool | int | float | str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _node_config(values: Mapping[str, ConfigValue]) -> str:
    """``--node-config`` text: space-separated ``key=value`` with TOML values.

    :raises ValueError: a key or value holds whitespace (Flower splits the text on it).
    """
    pairs = [f"{key}={_toml_value(value)}" for key, value in values.items()]
    for pair in pairs:
        if any(c.isspace() for c in pair):
            raise ValueError(f"node config entries may not contain whitespace: {pair!r}")
    return " ".join(pairs)


def _toml_value(value: ConfigValue) -> str:
    text = tomli_w.dumps({"v": value}).strip()
    return text.split("=", 1)[1].strip()


@dataclass(frozen=True)
class FlowerRun:
    """One ``flwr run``: the ``run_id``, its final ``status`` as ``flwr ls`` reports it
    (e.g. ``finished:completed``), the streamed ``log`` and the wall ``seconds``."""

    run_id: int | None
    status: str
    log: str
    seconds: float

    @property
    def completed(self) -> bool:
        return self.status == "finished:completed"


class LocalFederation:
    """A SuperLink and ``supernodes`` SuperNodes on 127.0.0.1 (module doc); use as a context
    manager, then :meth:`run`.

    ``workdir`` holds ``flwr-home/`` and the processes' logs (``superlink.log``,
    ``supernode-<i>.log``). SuperNode i gets ``--node-config`` ``partition-id=i
    num-partitions=n`` plus ``node_config`` (e.g. a chain file path). ``bin_dir``: where the
    ``flower-*`` and ``flwr`` commands are (default: next to this Python). ``start_timeout``
    bounds the wait for the SuperLink's ``/health``.

    :raises ValueError: ``supernodes < 1``, or (on entry) a ``node_config`` entry holding
        whitespace.
    :raises RuntimeError: (on entry) the SuperLink did not become healthy or a process exited.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        supernodes: int,
        *,
        node_config: Mapping[str, ConfigValue] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if isinstance(supernodes, bool) or not isinstance(supernodes, int) or supernodes < 1:
            raise ValueError(f"supernodes must be an integer >= 1, got {supernodes!r}")
        self.workdir = Path(workdir).resolve()
        self.supernodes = supernodes
        self.node_config = dict(node_config or {})
        self.bin_dir = Path(bin_dir) if bin_dir is not None else Path(sys.executable).parent
        self.start_timeout = start_timeout
        self.home = self.workdir / "flwr-home"
        self.port = 0
        self._processes: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    # ------------------------------------------------------------------ processes

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(QUIET_ENV)
        env["FLWR_HOME"] = str(self.home)
        env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH", "")])
        return env

    def _start(self, name: str, args: Sequence[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        try:
            process = subprocess.Popen(  # noqa: S603 (our own arguments)
                [str(self.bin_dir / args[0]), *args[1:]],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env(), cwd=self.workdir, start_new_session=True,
            )
        except BaseException:
            log.close()
            raise
        self._processes.append((name, process, log))

    def _healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.port}/health"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def _check_alive(self) -> None:
        for name, process, _ in self._processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode}; see "
                    f"{self.workdir / (name + '.log')}"
                )

    def start(self) -> None:
        """Start the SuperLink, wait for it, then start the SuperNodes (module doc)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = {"superlink": {"default": CONNECTION, CONNECTION: {
            "address": f"127.0.0.1:{self.port}", "insecure": True}}}
        (self.home / "config.toml").write_text(tomli_w.dumps(config))
        self._start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1",
                                  "--port", str(self.port),
                                  "--disable-runtime-dependency-installation"])
        deadline = time.monotonic() + self.start_timeout
        while not self._healthy():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the SuperLink was not healthy within {self.start_timeout} s")
            time.sleep(0.2)
        for i in range(self.supernodes):
            values: dict[str, ConfigValue] = {"partition-id": i,
                                              "num-partitions": self.supernodes}
            values.update(self.node_config)
            self._start(f"supernode-{i}", [
                "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                "--host", "127.0.0.1", "--port", str(free_port()),
                "--node-config", _node_config(values),
            ])
        self._check_alive()

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process this federation started (SIGTERM to its session, SIGKILL
        after ``grace`` seconds). Idempotent."""
        processes, self._processes = self._processes, []
        for _, process, _ in reversed(processes):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _, process, log in reversed(processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # the session may still hold the subprocesses it started
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
            log.close()

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs

    def _flwr(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 (our own arguments)
            [str(self.bin_dir / "flwr"), *args], capture_output=True, text=True,
            env=self._env(), cwd=self.workdir, timeout=timeout, check=False,
        )

    def run(
        self,
        app: str | os.PathLike[str],
        run_config: Mapping[str, ConfigValue] | None = None,
        *,
        timeout: float = 600.0,
    ) -> FlowerRun:
        """``flwr run <app> --stream`` with ``run_config`` overriding the app's
        ``[tool.flwr.app.config]`` (written to a TOML file, so values may hold spaces);
        waits for the run to finish and returns its status and log.

        :raises RuntimeError: the federation is not started.
        :raises subprocess.TimeoutExpired: the run took longer than ``timeout`` seconds.
        """
        if not self._processes:
            raise RuntimeError("the federation is not started")
        started = time.monotonic()
        args = ["run", str(Path(app).resolve()), CONNECTION, "--stream"]
        if run_config:
            path = self.workdir / "run-config.toml"
            path.write_text(tomli_w.dumps(dict(run_config)))
            args += ["--run-config", str(path)]
        done = self._flwr(args, timeout)
        log = done.stdout + done.stderr
        found = re.search(r"started run (\d+)", log)
        run_id = int(found.group(1)) if found else None
        status = "unknown"
        if run_id is not None:
            listed = self._flwr(["ls", CONNECTION, "--run-id", str(run_id), "--format",
                                 "json"], 60.0)
            status = _status_of(listed.stdout, run_id)
        return FlowerRun(run_id, status, log, time.monotonic() - started)


def _status_of(text: str, run_id: int) -> str:
    """The ``status`` of run ``run_id`` in ``flwr ls --format json`` output."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "unknown"
    runs = data.get("runs", []) if isinstance(data, dict) else []
    for run in runs:
        if isinstance(run, dict) and str(run.get("run-id")) == str(run_id):
            return str(run.get("status", "unknown"))
    return "unknown"


def _parse_assignment(text: str) -> tuple[str, ConfigValue]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    if not isinstance(parsed, bool | int | float | str):
        raise argparse.ArgumentTypeError(f"{key}: only scalars are allowed")
    return key.strip(), parsed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cloaknet.flower.local APP [--supernodes N] [--run-config k=v]...
    [--workdir DIR]``: run the app on a local deployment of N SuperNodes (run config
    ``clients`` = N unless given) and print its log; exit code 0 if the run completed, 1
    otherwise."""
    parser = argparse.ArgumentParser(prog="python -m cloaknet.flower.local",
                                     description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("app", type=Path, help="the Flower app directory")
    parser.add_argument("--supernodes", type=int, default=4,
                        help="SuperNodes to start (default 4); also the run config's "
                             "'clients' unless --run-config sets it")
    parser.add_argument("--run-config", type=_parse_assignment, action="append", default=[],
                        help="key=value (TOML value), overrides the app's config")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep FLWR_HOME and the logs here (default: a temporary dir)")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    import tempfile

    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        federation = stack.enter_context(LocalFederation(workdir, args.supernodes))
        run_config: dict[str, ConfigValue] = {"clients": args.supernodes}
        run_config.update(dict(args.run_config))
        run = federation.run(args.app, run_config, timeout=args.timeout)
    print(run.log)
    print(f"run {run.run_id}: {run.status} in {run.seconds:.1f} s")
    return 0 if run.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
