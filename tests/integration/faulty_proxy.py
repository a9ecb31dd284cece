"""A fault-injecting TCP proxy, run as its own process (in its own network namespace).

::

    python faulty_proxy.py --listen 10.213.7.20:9002 --target 10.213.7.12:9002 \
        --control /tmp/x/proxy.sock

It forwards every TCP connection accepted on ``--listen`` to ``--target``, byte for byte, and
takes commands on a Unix socket (``--control``: a file path, so the test can reach it from
outside the proxy's network namespace; nothing else listens). One JSON object per line in,
one JSON object per line out (the proxy's status, see :meth:`Proxy.status`):

* ``{"cmd": "status"}``
* ``{"cmd": "delay", "seconds": 0.02}`` — every segment read from either side is written to
  the other side ``seconds`` later (order kept, throughput not throttled: a latency);
* ``{"cmd": "cut"}`` — abort every current connection now, both sides (a reset each way);
* ``{"cmd": "cut", "after_bytes": N, "direction": "up"}`` — the same, armed: exactly ``N``
  more bytes are forwarded in ``direction`` (``"up"``: client to target, the default;
  ``"down"``: target to client), and the cut happens when the next segment would carry
  more, in the middle of whatever is in flight (that segment is split at the mark and only
  its first part is forwarded). ``N = 0`` with ``"down"`` drops the next reply whole;
* ``{"cmd": "partition", "seconds": S, "mode": "blackhole"}`` (also with ``after_bytes`` and
  ``direction``, armed like a cut) — abort every current connection and for ``S`` seconds let
  no new connection through: ``"blackhole"`` holds each new connection (what the client sends
  is buffered, as a peer's kernel would keep retransmitting) and connects it to the target
  when the partition ends; ``"refuse"`` resets each new connection at once;
* ``{"cmd": "heal"}`` — end a partition now;
* ``{"cmd": "stall"}`` (also armed, like a cut) — every current connection goes silent for
  good: what either side sends is dropped, end of stream included, and neither side is told
  (a path that loses every packet); new connections are forwarded as usual.

``status`` counts connections (accepted, refused, held, cut), the bytes forwarded each way
(``upstream``, ``downstream``), the faults still armed, and lists every fault that fired
(``events``) with both byte counts at that moment and, for an armed fault, the start of
the segment it withheld (``withheld``, hex). The proxy stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

#: Bytes read from a socket at a time.
READ_SIZE = 64 * 1024
#: Seconds allowed to connect to the target.
CONNECT_TIMEOUT = 5.0
#: Bytes of a withheld segment shown (hex) in a fault's event.
WITHHELD_SHOWN = 512


@dataclass
class _Trigger:
    """A fault armed at a byte mark of one direction: ``kind`` is "cut" or "partition"."""

    direction: str
    at_bytes: int
    kind: str
    seconds: float = 0.0
    mode: str = "blackhole"


@dataclass(eq=False)
class _Conn:
    """One proxied connection: the client's writer, the target's (once connected), the pump
    tasks, and the bytes it carried each way."""

    ident: int
    client: asyncio.StreamWriter
    target: asyncio.StreamWriter | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    up: int = 0
    down: int = 0
    dead: bool = False
    stalled: bool = False

    def abort(self) -> None:
        """Reset both sides and stop every pump (the calling task is left to return)."""
        self.dead = True
        for writer in (self.client, self.target):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()


class Proxy:
    """The proxy's state; see the module docstring for the commands."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.delay = 0.0
        self.partition_mode = "blackhole"
        self.partitioned = False
        self.healed = asyncio.Event()
        self.healed.set()
        self._heal_handle: asyncio.TimerHandle | None = None
        self.triggers: list[_Trigger] = []
        self.conns: set[_Conn] = set()
        self.upstream = 0
        self.downstream = 0
        self.accepted = 0
        self.refused = 0
        self.held = 0
        self.cut_connections = 0
        self.events: list[dict[str, Any]] = []
        self.controllers: set[asyncio.StreamWriter] = set()
        self._next_id = 0
        self._started = time.monotonic()

    # ------------------------------------------------------------------ faults

    def _event(self, kind: str, **extra: Any) -> None:
        self.events.append(
            {
                "kind": kind,
                "t": round(time.monotonic() - self._started, 3),
                "upstream": self.upstream,
                "downstream": self.downstream,
                **extra,
            }
        )

    def cut(self, why: str = "cut", withheld: bytes = b"") -> int:
        """Abort every current connection; returns how many there were. ``withheld`` is
        what a trigger kept from crossing (its first bytes are shown in the event)."""
        victims = [c for c in self.conns if not c.dead]
        details = [{"conn": c.ident, "up": c.up, "down": c.down} for c in victims]
        for conn in victims:
            conn.abort()
        self.cut_connections += len(victims)
        self._event(
            why,
            connections=len(victims),
            details=details,
            withheld_bytes=len(withheld),
            withheld=withheld[:WITHHELD_SHOWN].hex(),
        )
        return len(victims)

    def partition(self, seconds: float, mode: str, withheld: bytes = b"") -> None:
        """Cut everything and let nothing through for ``seconds``."""
        if mode not in ("blackhole", "refuse"):
            raise ValueError(f"unknown partition mode {mode!r}")
        self.partitioned = True
        self.partition_mode = mode
        self.healed.clear()
        self.cut("partition", withheld)
        if self._heal_handle is not None:
            self._heal_handle.cancel()
        self._heal_handle = asyncio.get_running_loop().call_later(seconds, self.heal)

    def heal(self) -> None:
        if self._heal_handle is not None:
            self._heal_handle.cancel()
            self._heal_handle = None
        if self.partitioned:
            self.partitioned = False
            self.healed.set()
            self._event("heal")

    def stall(self) -> int:
        """Silence every current connection for good; returns how many there were."""
        victims = [c for c in self.conns if not c.dead and not c.stalled]
        for conn in victims:
            conn.stalled = True
        self._event("stall", connections=len(victims))
        return len(victims)

    def _fire(self, trigger: _Trigger, withheld: bytes = b"") -> None:
        if trigger.kind == "cut":
            self.cut("cut", withheld)
        elif trigger.kind == "stall":
            self.stall()
        else:
            self.partition(trigger.seconds, trigger.mode, withheld)

    def arm(self, trigger: _Trigger) -> None:
        self.triggers.append(trigger)
        self.triggers.sort(key=lambda t: t.at_bytes)

    def _count(self, upstream: bool) -> int:
        return self.upstream if upstream else self.downstream

    def _next_trigger(self, upstream: bool) -> _Trigger | None:
        direction = "up" if upstream else "down"
        return next((t for t in self.triggers if t.direction == direction), None)

    def _forwarded(self, conn: _Conn, upstream: bool, size: int) -> None:
        if upstream:
            conn.up += size
            self.upstream += size
        else:
            conn.down += size
            self.downstream += size

    # ------------------------------------------------------------------ forwarding

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one accepted connection until either side ends or a fault aborts it."""
        self._next_id += 1
        conn = _Conn(self._next_id, writer)
        if self.partitioned and self.partition_mode == "refuse":
            self.refused += 1
            writer.transport.abort()
            return
        self.accepted += 1
        self.conns.add(conn)
        up: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        down: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        try:
            self._spawn(conn, self._read(reader, up))
            if self.partitioned:  # blackhole: hold it (buffering what comes) until healed
                self.held += 1
                await self.healed.wait()
            if conn.dead:
                return
            try:
                t_reader, t_writer = await asyncio.wait_for(
                    asyncio.open_connection(self.target_host, self.target_port),
                    CONNECT_TIMEOUT,
                )
            except (OSError, TimeoutError):
                conn.abort()
                return
            conn.target = t_writer
            if conn.dead:  # cut while connecting
                conn.abort()
                return
            writers = [
                self._spawn(conn, self._write(conn, up, t_writer, upstream=True)),
                self._spawn(conn, self._write(conn, down, writer, upstream=False)),
            ]
            self._spawn(conn, self._read(t_reader, down))
            # done when both directions delivered their end of stream, or on a fault
            await asyncio.wait(writers)
        finally:
            conn.abort()
            self.conns.discard(conn)

    def _spawn(self, conn: _Conn, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        conn.tasks.add(task)
        return task

    async def _read(
        self, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        """Read segments, stamping each with the time it may be written (now + delay)."""
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                queue.put_nowait((time.monotonic() + self.delay, data))
        except OSError:
            pass
        queue.put_nowait(None)

    async def _write(
        self,
        conn: _Conn,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        """Write the queued segments when due, firing the faults armed at their marks."""
        try:
            while True:
                item = await queue.get()
                if conn.stalled:
                    continue  # dropped: data and end of stream alike
                if item is None:
                    with contextlib.suppress(OSError):
                        if writer.can_write_eof():
                            writer.write_eof()
                    return
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                while data and not conn.dead and not conn.stalled:
                    trigger = self._next_trigger(upstream)
                    room = len(data)
                    if trigger is not None:
                        room = max(0, trigger.at_bytes - self._count(upstream))
                    part, data = data[:room], data[room:]
                    if part:
                        writer.write(part)
                        self._forwarded(conn, upstream, len(part))
                    if data and trigger is not None:
                        self.triggers.remove(trigger)
                        self._fire(trigger, data)
                if conn.dead:
                    return
                await writer.drain()
        except OSError:
            conn.abort()

    # ------------------------------------------------------------------ control

    def status(self) -> dict[str, Any]:
        return {
            "ok": True,
            "delay": self.delay,
            "partitioned": self.partitioned,
            "open": len(self.conns),
            "accepted": self.accepted,
            "refused": self.refused,
            "held": self.held,
            "cut_connections": self.cut_connections,
            "upstream": self.upstream,
            "downstream": self.downstream,
            "armed": [f"{t.kind} {t.direction} at {t.at_bytes}" for t in self.triggers],
            "events": self.events,
        }

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        after = request.get("after_bytes")
        if after is not None and (not isinstance(after, int) or after < 0):
            raise ValueError("after_bytes must be an int >= 0")
        direction = request.get("direction", "up")
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be 'up' or 'down', not {direction!r}")
        upstream = direction == "up"
        if cmd == "status":
            pass
        elif cmd == "delay":
            seconds = float(request["seconds"])
            if not 0 <= seconds <= 10:
                raise ValueError("delay must be in [0, 10] seconds")
            self.delay = seconds
        elif cmd in ("cut", "stall"):
            if after is None:
                self._fire(_Trigger(direction, 0, cmd))
            else:
                self.arm(_Trigger(direction, self._count(upstream) + after, cmd))
        elif cmd == "partition":
            seconds = float(request["seconds"])
            if not 0 < seconds <= 60:
                raise ValueError("a partition lasts (0, 60] seconds")
            mode = str(request.get("mode", "blackhole"))
            if mode not in ("blackhole", "refuse"):
                raise ValueError(f"unknown partition mode {mode!r}")
            if after is None:
                self.partition(seconds, mode)
            else:
                mark = self._count(upstream) + after
                self.arm(_Trigger(direction, mark, "partition", seconds, mode))
        elif cmd == "heal":
            self.heal()
        else:
            raise ValueError(f"unknown command {cmd!r}")
        return self.status()

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.controllers.add(writer)
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    if not isinstance(request, dict):
                        raise ValueError("expected a JSON object")
                    answer = self.command(request)
                except (ValueError, KeyError, TypeError) as exc:
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except OSError:
            pass
        finally:
            self.controllers.discard(writer)
            writer.close()

    async def shutdown(self) -> None:
        """Abort every connection, release held ones, end control sessions."""
        self.heal()
        self.cut("stop")
        for writer in list(self.controllers):
            writer.close()
        for _ in range(50):  # let every handler see its end (no task left to cancel)
            if not self.conns and not self.controllers:
                break
            await asyncio.sleep(0.01)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def serve(listen: str, target: str, control_path: str) -> None:
    """Run the proxy until SIGTERM/SIGINT."""
    target_host, target_port = _split(target)
    proxy = Proxy(target_host, target_port)
    host, port = _split(listen)
    server = await asyncio.start_server(proxy.handle, host, port, reuse_address=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(control_path)
    control = await asyncio.start_unix_server(proxy.control, control_path)
    os.chmod(control_path, 0o600)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"proxy {listen} -> {target}, control {control_path}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        control.close()
        await proxy.shutdown()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(control_path)
    print(f"proxy stopped: {json.dumps(proxy.status())}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a fault-injecting TCP proxy")
    parser.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--control", required=True, help="path of the Unix control socket")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.target, args.control))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
