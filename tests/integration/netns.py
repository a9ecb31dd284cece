"""A private network of Linux network namespaces for tests (root and iproute2 needed).

:class:`NetnsLab` makes one namespace per host plus one holding a Linux bridge; each host
gets a veth pair whose one end (``eth0``, with an address of a private /24) sits in the host's
namespace and whose other end is a port of the bridge. The host namespace of the machine is
never touched: the veth pairs are created inside the bridge's namespace and the addresses
exist only inside the lab's namespaces.

Every namespace is named ``<NETNS_PREFIX><pid>-<random>-<role>`` (``pid`` is the process that
made it). :func:`remove_stale` deletes the namespaces with that prefix whose maker is gone
(a run that crashed), killing what still runs in them; :meth:`NetnsLab.destroy` deletes a
lab's own namespaces. Processes run in a host's namespace with ``ip netns exec``
(:meth:`NetnsLab.start`); the test process itself reaches a namespace's network from a
helper thread that enters it with ``setns(2)`` (:meth:`NetnsLab.call`, :meth:`NetnsLab.http_get`),
so nothing has to be routed to the machine's own network.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

__all__ = [
    "NETNS_PREFIX",
    "Host",
    "NetnsLab",
    "NetnsUnavailable",
    "list_namespaces",
    "netns_lab",
    "remove_stale",
    "unavailable_reason",
]

#: Every namespace a lab makes starts with this; stale ones are found by it.
NETNS_PREFIX = "cloaknet-netns-"
#: ``setns(2)`` flag for a network namespace.
CLONE_NEWNET = 0x40000000
#: Seconds any single ``ip`` command may take.
IP_TIMEOUT = 15.0

T = TypeVar("T")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (the reason is the message)."""


def unavailable_reason() -> str | None:
    """Why a lab cannot be made here (not root, no ``ip``), or ``None``."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (run as root, as CI does)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def list_namespaces() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pids_in(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False).stdout
    return [int(word) for word in out.split() if word.isdigit()]


def _kill_all_in(netns: str) -> None:
    """SIGKILL every process still inside ``netns`` (only ever called on our namespaces)."""
    for _ in range(3):
        pids = [pid for pid in _pids_in(netns) if pid != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _owner(name: str) -> int | None:
    """The pid embedded in a lab namespace's name (``None`` if the name has none)."""
    head = name[len(NETNS_PREFIX) :].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete the namespaces left by labs whose process is gone; returns their names.

    Namespaces of labs whose maker still runs (e.g. another test session) are left alone.
    """
    removed = []
    for name in list_namespaces():
        if not name.startswith(NETNS_PREFIX):
            continue
        owner = _owner(name)
        if owner is not None and owner != os.getpid() and _alive(owner):
            continue
        _kill_all_in(name)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


def _enter_netns(netns: str) -> None:
    """Move the calling thread (only it) into ``netns``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({netns}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL if the test process dies (no orphans left)."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class Host:
    """One host of the lab: its ``role`` (e.g. ``mix1``), namespace and IPv4 address."""

    role: str
    netns: str
    address: str


@dataclass
class NetnsLab:
    """A bridge namespace and one namespace per role, on ``<subnet>.0/24``.

    Construction only picks names; :meth:`create` makes the network (raising
    :class:`NetnsUnavailable` if not even one namespace can be added), :meth:`destroy`
    removes it (also after a partial :meth:`create`). Hosts get addresses
    ``<subnet>.10``, ``.11``, ... in the order of ``roles``.
    """

    roles: Sequence[str]
    subnet: str = "10.213.7"
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")
    hosts: dict[str, Host] = field(init=False)
    bridge_netns: str = field(init=False)
    created: list[str] = field(init=False, default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        prefix = f"{NETNS_PREFIX}{self.run_id}-"
        self.bridge_netns = f"{prefix}bridge"
        self.hosts = {
            role: Host(role, f"{prefix}{role}", f"{self.subnet}.{10 + i}")
            for i, role in enumerate(self.roles)
        }

    def address(self, role: str) -> str:
        return self.hosts[role].address

    # ------------------------------------------------------------------ the network

    def _add_netns(self, name: str) -> None:
        proc = _ip("netns", "add", name, check=False)
        if proc.returncode != 0:
            raise NetnsUnavailable(f"ip netns add failed: {proc.stderr.strip()}")
        self.created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def create(self) -> None:
        """Make the bridge and every host, and wait until each host's address is usable."""
        self._add_netns(self.bridge_netns)
        br = self.bridge_netns
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts.values()):
            self._add_netns(host.netns)
            port = f"v{i}"
            _ip("-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", host.netns)
            _ip("-n", br, "link", "set", port, "master", "br0")
            _ip("-n", br, "link", "set", port, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
        self._wait_carrier()

    def _wait_carrier(self, timeout: float = 10.0) -> None:
        limit = time.monotonic() + timeout
        for host in self.hosts.values():
            while True:
                state = _ip("-n", host.netns, "-o", "link", "show", "eth0").stdout
                if "LOWER_UP" in state:
                    break
                if time.monotonic() > limit:
                    raise RuntimeError(f"eth0 in {host.netns} has no carrier: {state}")
                time.sleep(0.02)

    def destroy(self) -> list[str]:
        """Stop every process started here and delete every namespace made here; returns
        the problems met (an empty list when all went)."""
        self.stop_all()
        problems = []
        for name in reversed(self.created):
            _kill_all_in(name)
            proc = _ip("netns", "del", name, check=False)
            if proc.returncode != 0 and name in list_namespaces():
                problems.append(f"{name}: {proc.stderr.strip()}")
        self.created.clear()
        left = [n for n in list_namespaces() if n.startswith(f"{NETNS_PREFIX}{self.run_id}-")]
        problems.extend(f"{n}: still listed" for n in left)
        return problems

    # ------------------------------------------------------------------ processes

    def command(self, role: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``role``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[role].netns, *argv]

    def start(
        self,
        name: str,
        role: str,
        argv: Sequence[str],
        *,
        log: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stdout: int | IO[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``role``'s namespace as process ``name``; its stderr (and its
        stdout unless ``stdout`` is given) go to ``log``. It is killed if this process dies,
        and by :meth:`stop_all`."""
        if name in self.procs and self.procs[name].poll() is None:
            raise RuntimeError(f"{name} is already running")
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.command(role, argv),
                stdout=out if stdout is None else stdout,
                stderr=out,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # spawned from the main thread only
            )
        self.procs[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 5.0) -> int | None:
        """SIGTERM process ``name``, SIGKILL it after ``timeout`` s; returns its exit code."""
        proc = self.procs[name]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5)
        return proc.returncode

    def stop_all(self, timeout: float = 5.0) -> None:
        """Stop every process started here: SIGTERM to all, then SIGKILL the slow ones."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        limit = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)

    # ------------------------------------------------------------------ reaching a host

    def call(self, role: str, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` in a fresh thread inside ``role``'s network namespace (sockets it opens
        live there) and return its result or raise its exception."""
        box: dict[str, T] = {}
        error: list[BaseException] = []

        def run() -> None:
            try:
                _enter_netns(self.hosts[role].netns)
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller
                error.append(exc)

        thread = threading.Thread(target=run, name=f"netns-{role}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"call in {role}'s namespace took over {timeout} s")
        if error:
            raise error[0]
        return box["value"]

    def http_get(
        self, role: str, host: str, port: int, path: str, timeout: float = 2.0
    ) -> tuple[int, bytes]:
        """``GET http://host:port/path`` from inside ``role``'s namespace (no proxy, ever)."""

        def get() -> tuple[int, bytes]:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()

        return self.call(role, get, timeout=timeout + 5)

    def healthy(self, role: str, host: str, port: int) -> bool:
        """Whether ``/healthz`` at ``host:port`` answers 200 from ``role``'s namespace."""
        try:
            status, _ = self.http_get(role, host, port, "/healthz", timeout=1.0)
        except (OSError, TimeoutError, http.client.HTTPException):
            return False
        return status == 200


@contextlib.contextmanager
def netns_lab(roles: Sequence[str], subnet: str = "10.213.7") -> Iterator[NetnsLab]:
    """Remove stale lab namespaces, make a :class:`NetnsLab` for ``roles`` and yield it;
    every process and namespace it made is gone when the block ends, however it ends.

    :raises NetnsUnavailable: not root, no ``ip``, or ``ip netns add`` fails.
    :raises RuntimeError: the namespaces left behind (after the block's own exception).
    """
    reason = unavailable_reason()
    if reason is not None:
        raise NetnsUnavailable(reason)
    remove_stale()
    lab = NetnsLab(roles, subnet)
    problems: list[str] = []
    try:
        lab.create()
        yield lab
    finally:
        problems = lab.destroy()
    if problems:
        raise RuntimeError(f"namespaces left behind: {problems}")
