"""Helpers for tests that run `cloaknet node` as a real OS process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from cloaknet.chainfile import generate_node_keys, write_chain_file
from cloaknet.params import CloakParams
from mixnet.chain import ChainConfig, Limits, NodeInfo, RoundPolicy, TlsConfig

HOST = "127.0.0.1"
#: Small exact cloak parameters: loading them plans nothing.
PARAMS = CloakParams(modulus=1009, precision=10, messages=4, max_users=20)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free a moment ago."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def write_chain(
    directory: Path,
    *,
    mixes: int = 2,
    scheme: str = "ws",
    tls: TlsConfig | None = None,
    limits: Limits | None = None,
    users: int = 5,
) -> tuple[Path, list[int]]:
    """Keys ``<directory>/mix<i>.key`` and ``<directory>/chain.toml`` for ``mixes`` mixes and
    an analyzer on free ports of 127.0.0.1 (URLs with ``scheme``); returns the chain file
    and the ports in chain order."""
    names = [f"mix{i + 1}" for i in range(mixes)]
    keys = generate_node_keys(directory, names)
    ports = free_ports(mixes + 1)
    config = ChainConfig(
        chain_id="proc",
        mixes=tuple(
            NodeInfo(n, f"{scheme}://{HOST}:{p}", keys[n])
            for n, p in zip(names, ports, strict=False)
        ),
        sink=NodeInfo("analyzer", f"{scheme}://{HOST}:{ports[-1]}", None),
        sink_table="analyzer",
        policy=RoundPolicy(min_users=users, max_users=users, deadline_seconds=600.0),
        sections={},
        tls=tls,
        limits=limits if limits is not None else Limits(),
    )
    chain = directory / "chain.toml"
    write_chain_file(chain, config, PARAMS)
    return chain, ports


def cloaknet(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cloaknet ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "cloaknet", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


@contextlib.contextmanager
def node_process(args: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m cloaknet node ARGS`` in the background (stdout and stderr to ``log``);
    killed on exit if still running."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cloaknet", "node", *args], stdout=out, stderr=out
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def wait_healthy(
    port: int,
    proc: subprocess.Popen[bytes],
    *,
    scheme: str = "http",
    timeout: float = 30.0,
    context: ssl.SSLContext | None = None,
) -> None:
    """Wait until ``GET /healthz`` on ``port`` answers (raises if the process exits)."""
    limit = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the node exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(
                f"{scheme}://{HOST}:{port}/healthz", timeout=1, context=context
            ) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > limit:
            raise AssertionError("the node did not come up")
        time.sleep(0.05)
