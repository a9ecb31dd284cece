"""1,000 idle connections against the entry mix: the node's file descriptors stay bounded by
[limits].max_connections and an honest client is still served meanwhile.

The idle connections come from another process (so that this process's descriptors are the
node's and the honest client's only): half never send a byte, half finish the websocket
opening handshake and then send nothing."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from pathlib import Path

from mixnet.client import MixnetClient
from mixnet.core.policy import RoundPolicy
from mixnet.limits import Limits
from tests.mixnet.test_limits import refused
from tests.mixnet.test_nodes import WIDTH, payloads, result, running_chain

IDLE = 1000
MAX_CONNECTIONS = 100
#: Descriptors the node and the honest client may add besides the capped connections:
#: asyncio accepts a burst of connections before the guard sees them and closes evicted
#: sockets on the next turn of the loop (mixnet.limits); without the cap the count would
#: grow by IDLE.
SLACK = 150

ATTACKER = r"""
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for i in range(count):
    time.sleep(0.0005)  # ~2,000 a second: a flood that does not overflow the listen queue
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if i % 2:
        s.sendall(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
    held.append(s)
print("holding", len(held), flush=True)
sys.stdin.read()  # hold every socket until the test closes stdin
"""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_thousand_idle_connections_do_not_exhaust_the_entry_mix(
    tmp_path: Path,
) -> None:
    users = 4
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    limits = Limits(max_connections=MAX_CONNECTIONS, idle_seconds=30.0)
    async with running_chain(tmp_path, mixes=2, messages=1, policy=policy, limits=limits) as chain:
        entry = chain.mixes[0]
        baseline = open_fds()
        peak = baseline
        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, open_fds())
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", ATTACKER, str(entry.port), str(IDLE),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        try:
            assert attacker.stdout is not None
            line = await asyncio.wait_for(attacker.stdout.readline(), 60)
            assert line.decode().split() == ["holding", str(IDLE)]
            # the attacker holds all its sockets; the honest client is served meanwhile
            client = MixnetClient(chain.config, messages=1, payload_length=WIDTH,
                                  sink_url=chain.config.sink.url, connections=2, retry_for=30)
            async with client:
                receipts = await asyncio.gather(
                    *(client.submit(functools.partial(payloads, [v])) for v in range(users))
                )
                out = await asyncio.wait_for(result(client, receipts[0].round_id), 30)
            assert out["status"] == "ok" and out["sum"] == sum(range(users))
            assert attacker.returncode is None  # still holding its connections
            assert entry.guard.count <= MAX_CONNECTIONS
        finally:
            sampling = False
            await sampler
            if attacker.stdin is not None:
                attacker.stdin.close()
            await asyncio.wait_for(attacker.wait(), 30)
        counts = refused(entry)
        assert counts["evicted"] + counts["connections"] >= IDLE - MAX_CONNECTIONS
        assert peak - baseline <= MAX_CONNECTIONS + SLACK, (baseline, peak)
        print(f"fds: baseline {baseline}, peak {peak}; refused {counts}")
