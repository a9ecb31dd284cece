"""The websocket client library: submit values into the chain and wait for results.

::

    async with cloaknet.client.connect("chain.toml") as net:
        receipt = await net.submit(0.42)
        result = await net.result(receipt.round)

A submission discovers the entry mix's open round, verifies every mix's signed round key
against the identity keys in the chain file, encodes the value (Algorithm 1, with the
pre-randomizer in single-user mode), wraps each share in one onion layer per mix (in a thread
pool) and submits all ``m`` onions in one frame. On connection loss it resends the *same*
submission (the entry mix answers an exact retry ``accepted`` again, so a value never enters
one round twice); if the round closed before the submission was accepted it is encoded afresh
for the next round. It returns once the entry mix has acknowledged — i.e. stored — it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from cloaknet.chainfile import CloakChain, load_chain
from cloaknet.encoding import encode, encode_share, quantize
from cloaknet.errors import CloakError
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from mixnet.errors import BadSignature, MixnetError, RoundClosed, UnknownRound
from mixnet.frames import parse_announcements
from mixnet.keys import RoundKeyAnnouncement
from mixnet.onion import onion_length, wrap
from mixnet.wire import decode_frame, encode_frame, get_float, get_int, raise_for_error

__all__ = [
    "ChainClient",
    "ClientError",
    "Receipt",
    "RoundAborted",
    "RoundFailed",
    "RoundResult",
    "SubmissionRejected",
    "connect",
]

MAX_REPLY = 1 << 20


class ClientError(CloakError):
    """Base of the client library's errors."""


class SubmissionRejected(ClientError):
    """The entry mix refused the submission for a reason a retry cannot fix; ``code`` is the
    wire error code."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code


class RoundAborted(ClientError):
    """The round ended without a result (below ``min_users`` at the deadline)."""


class RoundFailed(ClientError):
    """The analyzer reported an error for the round (e.g. a share count mismatch)."""


@dataclass(frozen=True)
class Receipt:
    """Proof of acceptance: the round the value went into and the client id used."""

    round: int
    client: str


@dataclass(frozen=True)
class RoundResult:
    """A round's published result (see the analyzer node)."""

    round: int
    users: int
    estimate: float
    raw: dict[str, Any]


@dataclass(frozen=True)
class _RoundInfo:
    round_id: int
    deadline: float
    public_keys: tuple[bytes, ...]


class _Channel:
    """One websocket to a node, reconnecting on demand; one request at a time."""

    def __init__(self, url: str, *, max_size: int, retry_for: float) -> None:
        self.url = url
        self.max_size = max_size
        self.retry_for = retry_for
        self._conn: ClientConnection | None = None
        self._lock = asyncio.Lock()

    async def request(self, frame: dict[str, object]) -> dict[str, object]:
        """Send ``frame`` and return the reply; error replies raise the matching
        :class:`MixnetError`. Connection failures are retried for ``retry_for`` seconds."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_for
        delay = 0.05
        async with self._lock:
            while True:
                try:
                    if self._conn is None:
                        self._conn = await ws_connect(
                            self.url, compression=None, max_size=self.max_size, proxy=None
                        )
                    await self._conn.send(encode_frame(frame))
                    raw = await self._conn.recv()
                    break
                except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError):
                    await self.close()
                    if loop.time() >= give_up:
                        raise
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 1.0)
        if not isinstance(raw, bytes):
            raise SubmissionRejected("malformed-frame", "node sent a text frame")
        reply = decode_frame(raw, max_size=self.max_size)
        raise_for_error(reply)
        return reply

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


class ChainClient:
    """A connection to one chain. Use :func:`connect`; safe for many concurrent submissions
    from one event loop (they are spread over ``connections`` websockets)."""

    def __init__(
        self,
        chain: CloakChain,
        *,
        connections: int = 4,
        retry_for: float = 60.0,
        rng: RandomSource = SYSTEM_RANDOM,
        workers: int | None = None,
    ) -> None:
        self.chain = chain
        self.rng = rng
        self.retry_for = retry_for
        config = chain.config
        submit_size = chain.messages * (self._onion_length() + 16) + 64 * 1024
        self._entry = [
            _Channel(config.mixes[0].url, max_size=max(submit_size, MAX_REPLY), retry_for=retry_for)
            for _ in range(max(1, connections))
        ]
        self._next = 0
        self._analyzer = _Channel(config.analyzer.url, max_size=MAX_REPLY, retry_for=retry_for)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cloaknet-wrap")
        self._round: _RoundInfo | None = None
        self._round_lock = asyncio.Lock()

    def _onion_length(self) -> int:
        return onion_length(self.chain.payload_length, len(self.chain.config.mixes))

    async def aclose(self) -> None:
        for channel in (*self._entry, self._analyzer):
            await channel.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ rounds

    async def _current_round(self, *, refresh: bool = False) -> _RoundInfo:
        async with self._round_lock:
            if self._round is not None and not refresh:
                return self._round
            reply = await self._entry[0].request({"type": "get-round"})
            self._round = self._verify_round(reply)
            return self._round

    def _verify_round(self, reply: dict[str, object]) -> _RoundInfo:
        config = self.chain.config
        round_id = get_int(reply, "round", min_value=0)
        if (
            get_int(reply, "messages") != self.chain.messages
            or get_int(reply, "payload_length") != self.chain.payload_length
        ):
            raise SubmissionRejected(
                "bad-chain-config", "the entry mix's parameters differ from the chain file"
            )
        anns: list[RoundKeyAnnouncement] = parse_announcements(
            reply, chain_id=config.chain_id, max_count=len(config.mixes)
        )
        if [a.node for a in anns] != [m.name for m in config.mixes]:
            raise BadSignature("round keys do not come from the chain's mixes in order")
        for ann, mix in zip(anns, config.mixes, strict=True):
            if ann.round_id != round_id or mix.identity is None:
                raise BadSignature(f"round key of {mix.name} is for another round")
            ann.verify(mix.identity)
        return _RoundInfo(round_id, get_float(reply, "deadline"), tuple(a.public_key for a in anns))

    # ------------------------------------------------------------------ submit

    def _messages(self, x: float, clip: bool) -> list[bytes]:
        """The fixed-width payloads of one value: the cloak's shares (Algorithm 1, with the
        pre-randomizer in single-user mode), or the chain's comparison protocol's messages."""
        protocol = self.chain.protocol
        modulus = self.chain.message_modulus
        if protocol is None:
            values = encode(x, self.chain.cloak(), self.rng, clip=clip)
        else:
            k = 1 << 52
            clipped = quantize(x, k, clip=clip) / k if clip else x
            values = [int(v) for v in protocol.encode_many(np.array([clipped]), self.rng)[0]]
        return [encode_share(v, modulus) for v in values]

    def _prepare(self, x: float, info: _RoundInfo, clip: bool) -> list[bytes]:
        """Encode ``x`` and wrap its payloads for round ``info`` (tests use it to craft frames)."""
        return self._wrap(self._messages(x, clip), info)

    async def submit_shares(
        self, shares: Sequence[int], *, client_id: str | None = None
    ) -> Receipt:
        """Submit pre-computed shares (for experiments that model colluding or deviating
        users, who choose their own messages). ``shares`` must be ``m`` integers in [0, N).
        Retries like :meth:`submit`: if the round closed first, the same shares go into the
        next round."""
        if len(shares) != self.chain.messages:
            raise SubmissionRejected("wrong-count", f"expected {self.chain.messages} shares")
        payloads = [encode_share(int(y), self.chain.message_modulus) for y in shares]
        return await self._submit_payloads(lambda: payloads, client_id)

    async def _submit_payloads(
        self, make_payloads: Callable[[], list[bytes]], client_id: str | None
    ) -> Receipt:
        client = client_id or secrets.token_hex(16)
        channel = self._entry[self._next % len(self._entry)]
        self._next += 1
        loop = asyncio.get_running_loop()
        refresh = False
        for _attempt in range(1000):
            info = await self._current_round(refresh=refresh)
            onions = await loop.run_in_executor(self._pool, self._wrap, make_payloads(), info)
            try:
                await channel.request(
                    {"type": "submit", "round": info.round_id, "client": client, "onions": onions}
                )
                return Receipt(info.round_id, client)
            except (RoundClosed, UnknownRound):
                refresh = True  # encode afresh for the next round
                await asyncio.sleep(0.05)
            except MixnetError as exc:
                raise SubmissionRejected(exc.code, exc.reason) from exc
        raise SubmissionRejected("round-closed", "no round accepted the submission")

    def _wrap(self, payloads: list[bytes], info: _RoundInfo) -> list[bytes]:
        return [
            wrap(p, info.public_keys, chain_id=self.chain.config.chain_id, round_id=info.round_id)
            for p in payloads
        ]

    async def submit(
        self, x: float, *, clip: bool = False, client_id: str | None = None
    ) -> Receipt:
        """Encode and submit one value; returns once the entry mix has stored it.

        A fresh encoding (Algorithm 1, with the pre-randomizer in single-user mode) is made for
        each round tried; within a round, retries after a connection loss resend the identical
        onions, which the entry mix acknowledges without counting them twice.

        :raises InputRangeError: x is NaN or outside [0, 1] (unless ``clip``).
        :raises SubmissionRejected: the entry mix refused it for a non-retryable reason.
        :raises OSError: the entry mix was unreachable for ``retry_for`` seconds.
        """
        quantize(x, 1, clip=clip)  # validate before any work (InputRangeError)
        return await self._submit_payloads(lambda: self._messages(x, clip), client_id)

    async def submit_many(
        self,
        values: Sequence[float],
        *,
        concurrency: int = 32,
        clip: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> list[Receipt]:
        """Submit many values concurrently (for simulations). Returns receipts in order."""
        receipts: list[Receipt | None] = [None] * len(values)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(values)):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                receipts[i] = await self.submit(values[i], clip=clip)
                if progress is not None:
                    progress(1)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        return [r for r in receipts if r is not None]

    # ------------------------------------------------------------------ results

    async def result(self, round_id: int, *, timeout: float | None = None) -> RoundResult:
        """Wait for the analyzer's result of ``round_id``.

        :raises RoundAborted: the round was aborted.
        :raises RoundFailed: the analyzer reported an error for the round.
        :raises TimeoutError: no result within ``timeout`` seconds.
        """

        async def wait() -> RoundResult:
            while True:
                reply = await self._analyzer.request({"type": "subscribe", "round": round_id})
                if reply.get("type") == "result":
                    return self._parse_result(reply)

        return await asyncio.wait_for(wait(), timeout=timeout)

    @staticmethod
    def _parse_result(reply: dict[str, object]) -> RoundResult:
        status = reply.get("status")
        round_id = get_int(reply, "round", min_value=0)
        if status == "aborted":
            raise RoundAborted(f"round {round_id} was aborted")
        if status != "ok":
            raise RoundFailed(f"round {round_id}: {reply.get('error')}")
        estimate = reply.get("estimate")
        if not isinstance(estimate, float):
            raise RoundFailed(f"round {round_id}: malformed result")
        return RoundResult(round_id, get_int(reply, "users", min_value=0), estimate, dict(reply))


@contextlib.asynccontextmanager
async def connect(chain: str | Path | CloakChain, **kwargs: Any) -> AsyncIterator[ChainClient]:
    """Open a :class:`ChainClient` for a chain file (or a loaded :class:`CloakChain`)."""
    loaded = chain if isinstance(chain, CloakChain) else load_chain(chain)
    client = ChainClient(loaded, **kwargs)
    try:
        yield client
    finally:
        await client.aclose()
