"""The websocket client library: submit values into the chain and wait for results.

::

    async with cloaknet.client.connect("chain.toml") as net:
        receipt = await net.submit(0.42)
        result = await net.result(receipt.round)

A :class:`ChainClient` only knows what values mean: it turns a value into the chain
protocol's ``m`` fixed-width payloads (the protocol's ``encode_value`` — for the cloak
Algorithm 1, with the pre-randomizer in single-user mode — then
:func:`~cloaknet.encoding.encode_share`), and reads the analyzer's results. Everything about
the network is :class:`mixnet.client.MixnetClient`'s: it discovers the entry mix's open round,
verifies every mix's signed round key against the identity keys in the chain file, wraps each
payload in one onion layer per mix (in a thread pool) and submits all ``m`` onions in one
frame. On connection loss it resends the *same* submission (the entry mix answers an exact
retry ``accepted`` again, so a value never enters one round twice); if the round closed before
the submission was accepted, the value is encoded afresh for the next round. A submission
returns once the entry mix has acknowledged — i.e. stored — it.

On a chain with ``[admission]`` the client needs a credential — its Ed25519 client key
(``cloaknet keygen --client``), listed in the chain file or admitted by the issuer's
token::

    async with cloaknet.client.connect("chain.toml", credential=Path("client.key")) as net:
        receipt = await net.submit(0.42)

Every submission is then signed with that key, which is also its client id; the entry mix
takes one submission per credential per round.

On a chain whose ``[protocol]`` sums vectors (``name = "vector"``,
:mod:`cloaknet.vector_table`) a value is one user's vector — a 1-D sequence or numpy array of
the protocol's dimension d — and one submission carries its d·m payloads (each coordinate
clipped, scaled, rounded, noised and split by
:class:`~cloaknet.protocols.vector.VectorSumProtocol`); the result's ``vector`` holds the
d estimated coordinate sums::

    async with cloaknet.client.connect("chain.toml") as net:
        receipt = await net.submit(update)                 # len(update) == d
        summed = (await net.result(receipt.round)).vector  # d floats

All randomness of the encoding comes from the client's ``rng``, by default the OS CSPRNG
(:data:`~cloaknet.randomness.SYSTEM_RANDOM`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import operator
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import numpy as np
from nacl.signing import SigningKey
from numpy.typing import NDArray

from cloaknet.chainfile import CloakChain, load_chain
from cloaknet.encoding import check_input, encode_share
from cloaknet.errors import CloakError, InputRangeError
from cloaknet.protocols.vector_chain import VectorChainProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from mixnet.admission import parse_token
from mixnet.client import MAX_REPLY, MixnetClient
from mixnet.errors import LinkClosed, MalformedFrame, MixnetError
from mixnet.frames import ROUND_ID_MAX
from mixnet.journal import SubmissionJournal
from mixnet.keys import read_key_file
from mixnet.link import Backoff
from mixnet.tls import TlsError
from mixnet.wire import get_float, get_int

__all__ = [
    "ChainClient",
    "ClientError",
    "Receipt",
    "RoundAborted",
    "RoundFailed",
    "RoundResult",
    "SubmissionRejected",
    "Value",
    "connect",
]

#: What :meth:`ChainClient.submit` takes: a number in [0, 1] on a scalar chain, one user's
#: vector (a 1-D sequence or numpy array of d reals) on a vector chain.
Value: TypeAlias = float | Sequence[float] | NDArray[Any]
#: Reply bytes allowed per coordinate of a published vector (a msgpack float64 takes 9).
_REPLY_BYTES_PER_COORDINATE = 16

#: Spacing of repeated ``subscribe`` requests while the analyzer answers ``pending``.
_POLL = Backoff(base=0.05, cap=1.0)
#: Keys of a ``result`` reply that belong to the frame, not to the result.
_FRAME_KEYS = frozenset({"v", "type"})


class ClientError(CloakError):
    """Base of the client library's errors."""


class SubmissionRejected(ClientError):
    """A submission was refused for a reason a retry cannot fix: by the entry mix (e.g.
    ``duplicate-client``), by the client's own checks of the chain (``bad-signature``: a round
    key not signed by the mix the chain file lists; ``parameter-mismatch``: the entry mix runs
    rounds of another shape), or because rounds kept closing for ``retry_for`` seconds
    (``round-closed`` / ``unknown-round``). ``code`` is the wire error code; the
    :class:`~mixnet.errors.MixnetError` is the ``__cause__``."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code


class RoundAborted(ClientError):
    """The round ended without a result (below ``min_users`` at the deadline)."""


class RoundFailed(ClientError):
    """The analyzer reported an error for the round (e.g. a share count mismatch)."""


@dataclass(frozen=True)
class Receipt:
    """Proof of acceptance: the ``round`` the value went into, the ``client`` id used, and
    ``digest``, :func:`mixnet.core.submission_digest` of the box the entry mix accepted."""

    round: int
    client: str
    digest: bytes = b""


@dataclass(frozen=True)
class RoundResult:
    """A round's published result: ``round``, ``users`` (n), ``estimate`` (of Σ x_i) and
    ``raw``, every field the analyzer published (see
    :func:`cloaknet.analysis.analyze_round`; e.g. ``status``, ``protocol``, ``messages``,
    ``estimate_exact`` for the cloak, ``completed_at``).

    ``vector`` is ``None`` on a scalar chain. On a vector chain it is the estimate of
    Σ_i clip(x_i), one float per coordinate (exactly d of them), and ``estimate`` is the
    total of those coordinates (:mod:`cloaknet.protocols.vector_chain`)."""

    round: int
    users: int
    estimate: float
    raw: dict[str, Any]
    vector: tuple[float, ...] | None = None


class ChainClient:
    """A client of one chain (use :func:`connect`); safe for many concurrent submissions from
    one event loop, spread over ``connections`` websockets to the entry mix.

    ``retry_for`` (seconds) bounds how long a request retries connection failures and how long
    a submission keeps trying new rounds; ``workers`` sizes the wrapping thread pool; ``rng``
    feeds the encoding (default: the OS CSPRNG — only tests and reproducible simulations pass
    another). :attr:`mixnet` is the underlying :class:`~mixnet.client.MixnetClient`.
    :attr:`vector` is the chain's :class:`~cloaknet.protocols.vector_chain.VectorChainProtocol`
    when the chain sums vectors (``None`` otherwise); its ``dimension`` is the length every
    submitted vector must have. Vector encodings run in a worker thread, one at a time.

    ``credential`` is the client's key on a chain with ``[admission]``: a key file written
    by ``cloaknet keygen --client`` (a path, read at once) or a
    :class:`~nacl.signing.SigningKey`; ``token`` the issuer's admission token for it (its
    base64 text or 72 bytes; ``None`` when the key is listed in the chain file). Every
    submission is then signed, and its client id is the key's public half, so the entry
    mix takes one submission of this client per round (:meth:`submit_many` with a
    credential puts at most one value into each round; the rest are refused
    ``duplicate-client``).

    ``journal`` (a file path, or an open :class:`~mixnet.journal.SubmissionJournal`) keeps
    every submission on disk from before it is sent until the entry mix answers it, so that a
    process restarted before its receipt learns whether the value was counted instead of
    counting it twice: :meth:`submit` then needs a ``client_id`` that stays with the value
    (README, "Exactly once across restarts"). A journal opened from a path is closed by
    :meth:`aclose`.

    Construction opens nothing but the journal; :meth:`aclose` (or ``async with``) closes the
    connections.

    :raises TypeError: ``chain`` is not a :class:`~cloaknet.chainfile.CloakChain`, ``rng``
        not a :class:`~cloaknet.randomness.RandomSource`, or ``credential`` not a path or
        a ``SigningKey``.
    :raises ValueError: ``connections < 1``, ``retry_for`` negative or not finite, or a
        ``token`` without a ``credential``.
    :raises KeyFileError: the key file cannot be read or is not private (mode 0600), or
        the token text is not a token.
    :raises JournalError: the journal file cannot be created or used.
    """

    def __init__(
        self,
        chain: CloakChain,
        *,
        connections: int = 4,
        retry_for: float = 60.0,
        rng: RandomSource = SYSTEM_RANDOM,
        workers: int | None = None,
        credential: str | Path | SigningKey | None = None,
        token: str | bytes | None = None,
        journal: str | Path | SubmissionJournal | None = None,
    ) -> None:
        if not isinstance(chain, CloakChain):
            raise TypeError(f"chain must be a CloakChain, not {type(chain).__name__}")
        if not isinstance(rng, RandomSource):
            raise TypeError(f"rng must be a RandomSource, not {type(rng).__name__}")
        signing_key = _signing_key(credential)
        if token is not None and signing_key is None:
            raise ValueError("an admission token needs a credential (the client's key)")
        self.chain = chain
        self.rng = rng
        self.retry_for = retry_for
        protocol = chain.protocol
        #: the chain's vector protocol (``None`` on a scalar chain)
        self.vector: VectorChainProtocol | None = (
            protocol if isinstance(protocol, VectorChainProtocol) else None
        )
        self._encoding = threading.Lock()  # one vector encoding at a time draws from rng
        max_reply = MAX_REPLY
        if self.vector is not None:
            max_reply += _REPLY_BYTES_PER_COORDINATE * self.vector.dimension
        parsed_token = parse_token(token) if isinstance(token, str) else token
        opened = journal if journal is None or isinstance(journal, SubmissionJournal) else (
            SubmissionJournal(journal)
        )
        self._own_journal = opened is not journal
        try:
            self.mixnet = MixnetClient(
                chain.config,
                messages=chain.messages,
                payload_length=chain.payload_length,
                sink_url=chain.config.sink.url,
                connections=connections,
                retry_for=retry_for,
                workers=workers,
                max_reply=max_reply,
                signing_key=signing_key,
                token=parsed_token,
                journal=opened,
            )
        except BaseException:
            if self._own_journal and opened is not None:
                opened.close()
            raise

    @property
    def journal(self) -> SubmissionJournal | None:
        """The submission journal (``None`` without one): :meth:`~mixnet.journal.
        SubmissionJournal.kept` lists what a restarted application still has to submit again
        under the same client ids, and :meth:`~mixnet.journal.SubmissionJournal.discard`
        gives up on one (after ``outcome-unknown``, accepting that the value may count
        twice)."""
        return self.mixnet.journal

    async def aclose(self) -> None:
        """Close every connection and the thread pool (idempotent); later requests raise
        :class:`~mixnet.errors.LinkClosed`."""
        await self.mixnet.aclose()
        if self._own_journal and self.mixnet.journal is not None:
            self.mixnet.journal.close()

    async def __aenter__(self) -> ChainClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ submit

    def _payloads(self, x: float, clip: bool) -> list[bytes]:
        """One fresh encoding of ``x``: the protocol's ``m`` messages as fixed-width payloads."""
        values = self.chain.protocol.encode_value(x, self.rng, clip=clip)
        modulus = self.chain.message_modulus
        return [encode_share(v, modulus) for v in values]

    def _vector_payloads(self, vector: VectorChainProtocol, x: NDArray[np.float64]) -> (
        list[bytes]
    ):
        """One fresh encoding of the checked vector ``x``: its d·m payloads (one encoding at
        a time, so ``rng`` is never drawn from by two threads at once)."""
        with self._encoding:
            return vector.encode_payloads(x, self.rng)

    def _check(self, x: object, clip: bool) -> Any:
        """``x`` checked for this chain's protocol: the number itself on a scalar chain
        (:func:`~cloaknet.encoding.check_input`), a float64 array of shape (d,) on a vector
        chain (:meth:`VectorChainProtocol.check_vector`).

        :raises InputRangeError: ``x`` is not a valid input of the chain's protocol.
        """
        if self.vector is None:
            check_input(x, clip=clip)  # type: ignore[arg-type]  # checks any object
            return x
        return self.vector.check_vector(x)

    async def _submit_checked(self, x: Any, clip: bool, client_id: str | None) -> Receipt:
        """Submit the checked value ``x`` (:meth:`_check`), encoded afresh for every round
        tried. A vector's first encoding is made in a worker thread (it can take a while
        for large d), later ones — only after a round closed first — on the loop."""
        vector = self.vector
        if vector is None:
            return await self._submit(lambda: self._payloads(x, clip), client_id)
        ready = [await asyncio.to_thread(self._vector_payloads, vector, x)]

        def make_payloads() -> list[bytes]:
            return ready.pop() if ready else self._vector_payloads(vector, x)

        return await self._submit(make_payloads, client_id)

    async def _submit(
        self, make_payloads: Callable[[], Sequence[bytes]], client_id: str | None
    ) -> Receipt:
        """:meth:`MixnetClient.submit`, with its refusals turned into
        :class:`SubmissionRejected` (``LinkClosed``, ``TlsError`` and connection failures
        pass through)."""
        try:
            receipt = await self.mixnet.submit(make_payloads, client_id=client_id)
        except (LinkClosed, TlsError):
            raise
        except MixnetError as exc:
            raise SubmissionRejected(exc.code, exc.reason) from exc
        return Receipt(receipt.round_id, receipt.client_id, receipt.digest)

    async def submit(
        self, x: Value, *, clip: bool = False, client_id: str | None = None
    ) -> Receipt:
        """Encode and submit one user's value; returns once the entry mix has stored it.

        On a scalar chain ``x`` is an int, float or :class:`~fractions.Fraction` in [0, 1];
        with ``clip=True`` values outside are clipped to 0 or 1. On a vector chain
        (:attr:`vector` is not ``None``) ``x`` is a 1-D sequence (of ints, floats, Fractions
        or numpy reals, not bools) or a 1-D numpy array of a real dtype, of length d, every
        coordinate finite; the local randomizer clips it to L2 norm C (``clip`` has no
        effect), rounds, adds the user's noise and splits every coordinate, and the d·m
        payloads go in one submission. ``x`` is checked before anything is sent. A fresh
        encoding is made for each round tried; within a round, retries after a connection
        loss resend the identical onions, which the entry mix acknowledges without counting
        them twice. ``client_id`` (1..128 characters) defaults to a random one; with a
        ``credential`` it is the credential's text and may not be anything else. With a
        ``journal`` it must be given and stay with the value: a submission the journal still
        holds for it from before a restart is resent first, identical, and only if its round
        closed without it is the value submitted afresh (:mod:`mixnet.journal`; the entry
        mix no longer knowing that round is ``SubmissionRejected("outcome-unknown")``).

        :raises InputRangeError: x is not a number, is NaN, or lies outside [0, 1] without
            ``clip`` (scalar chain); x is not a 1-D sequence or array of d finite reals
            (vector chain).
        :raises ValueError, TypeError: ``client_id`` is not a str of 1..128 characters (or
            not the credential's text), or is missing with a journal.
        :raises JournalError: the journal cannot be written (nothing was sent).
        :raises SubmissionRejected: the submission was refused (see its ``code``).
        :raises LinkClosed: the client was closed.
        :raises TlsError: the entry mix's TLS certificate is not trusted by the chain file's
            ``[tls].ca`` (or the system's CAs), or it does not speak TLS; not retried.
        :raises OSError, ConnectionClosed, InvalidHandshake, TimeoutError: the entry mix was
            unreachable for ``retry_for`` seconds.
        """
        checked = self._check(x, clip)
        return await self._submit_checked(checked, clip, client_id)

    async def submit_shares(
        self, shares: Sequence[int], *, client_id: str | None = None
    ) -> Receipt:
        """Submit pre-computed messages (for experiments that model colluding or deviating
        users, who choose their own). ``shares`` must be ``m`` integers in
        ``[0, message_modulus)``; they are checked before anything is sent. Retries like
        :meth:`submit`, except that if the round closed first the *same* shares go into the
        next round.

        :raises SubmissionRejected: not exactly ``m`` shares (code ``wrong-count``), or the
            submission was refused as for :meth:`submit`.
        :raises TypeError: a share is not an integer (a float is refused, not truncated).
        :raises ShareError: a share lies outside ``[0, message_modulus)``.
        :raises LinkClosed, OSError, ConnectionClosed, InvalidHandshake, TimeoutError: as
            :meth:`submit`.
        """
        if len(shares) != self.chain.messages:
            raise SubmissionRejected(
                "wrong-count", f"expected {self.chain.messages} shares, got {len(shares)}"
            )
        modulus = self.chain.message_modulus
        payloads = [encode_share(operator.index(y), modulus) for y in shares]
        return await self._submit(lambda: payloads, client_id)

    async def submit_many(
        self,
        values: Sequence[Value] | NDArray[Any],
        *,
        concurrency: int = 32,
        clip: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> list[Receipt]:
        """Submit many users' values, up to ``concurrency`` at a time (for simulations);
        returns their receipts in the order of ``values``. ``progress(1)`` is called after
        each acknowledged submission. On a vector chain ``values`` holds one vector per user
        (a sequence of vectors, or a 2-D array of shape (n, d)), each submitted as
        :meth:`submit` does.

        Every value is checked first: if one is invalid, nothing is sent and its error is
        raised. If a submission fails, the others still in flight are cancelled and awaited —
        no task is left running — and that first failure is raised (values already
        acknowledged stay in their round).

        :raises ValueError: ``concurrency < 1``.
        :raises InputRangeError: a value is invalid (nothing was sent; on a vector chain the
            message names the vector's index).
        :raises SubmissionRejected, LinkClosed, OSError, ConnectionClosed, InvalidHandshake,
            TimeoutError: the first submission that failed, as :meth:`submit`.
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if self.mixnet.journal is not None:
            raise ValueError(
                "submit_many draws a random client id per value; with a journal, submit each "
                "value with its own stable client_id"
            )
        if self.vector is not None and not isinstance(values, Sequence | np.ndarray):
            raise InputRangeError(
                f"expected a sequence of vectors or a 2-D array, got {type(values).__name__}"
            )
        items: list[Any] = list(values)
        for index, value in enumerate(items):
            if self.vector is None:
                self._check(value, clip)
                continue
            try:
                items[index] = self._check(value, clip)
            except InputRangeError as exc:
                raise InputRangeError(f"vector {index}: {exc}") from None
        receipts: list[Receipt | None] = [None] * len(items)
        todo = iter(range(len(items)))

        async def worker() -> None:
            for index in todo:  # one shared iterator: each index is taken once
                receipts[index] = await self._submit_checked(items[index], clip, None)
                if progress is not None:
                    progress(1)

        failure: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(concurrency, len(items))):
                    group.create_task(worker())
        except BaseExceptionGroup as errors:
            failure = _first_leaf(errors)
        if failure is not None:
            raise failure  # outside the except block: not chained to the group
        return [receipt for receipt in receipts if receipt is not None]

    # ------------------------------------------------------------------ results

    async def result(self, round_id: int, *, timeout: float | None = None) -> RoundResult:
        """Wait for the analyzer's result of ``round_id`` (``timeout`` seconds, ``None``:
        forever).

        Asks the analyzer ``subscribe {round}``; it answers ``result {...}`` once the round is
        analyzed, or ``pending {round}`` after a while, and then the client asks again.

        :raises TypeError, ValueError: ``round_id`` is not an int in 0..2**63-1.
        :raises RoundAborted: the round was aborted.
        :raises RoundFailed: the analyzer reported an error for the round.
        :raises TimeoutError: no result within ``timeout`` seconds.
        :raises MalformedFrame: the reply is about another round, or an ``ok`` result lacks a
            valid ``users`` or ``estimate`` (or, on a vector chain, ``vector``: d finite
            numbers).
        :raises MixnetError: the analyzer answered with an error frame (not retried), or
            :class:`~mixnet.tls.TlsError`: its TLS certificate is not trusted.
        :raises LinkClosed: the client was closed.
        :raises OSError, ConnectionClosed, InvalidHandshake, TimeoutError: the analyzer was
            unreachable for ``retry_for`` seconds.
        """
        if isinstance(round_id, bool) or not isinstance(round_id, int):
            raise TypeError(f"round_id must be an int, not {type(round_id).__name__}")
        if not 0 <= round_id <= ROUND_ID_MAX:
            raise ValueError(f"round_id must be in 0..{ROUND_ID_MAX}, got {round_id}")
        async with asyncio.timeout(timeout):
            return await self._await_result(round_id)

    async def _await_result(self, round_id: int) -> RoundResult:
        attempt = 0
        while True:
            reply = await self.mixnet.sink_request(
                {"type": "subscribe", "round": round_id}, expect=("result", "pending")
            )
            answered = get_int(reply, "round", min_value=0, max_value=ROUND_ID_MAX)
            if answered != round_id:
                raise MalformedFrame(
                    f"asked for round {round_id}, the analyzer answered about round {answered}"
                )
            if reply["type"] == "result":
                dimension = None if self.vector is None else self.vector.dimension
                return _parse_result(round_id, reply, dimension)
            await asyncio.sleep(_POLL.delay(attempt))
            attempt += 1


def _signing_key(credential: str | Path | SigningKey | None) -> SigningKey | None:
    """The client key ``credential`` names: a key file's path (read now) or the key."""
    if credential is None or isinstance(credential, SigningKey):
        return credential
    if isinstance(credential, str | Path):
        return read_key_file(credential)
    raise TypeError(
        f"credential must be a key file path or a SigningKey, not {type(credential).__name__}"
    )


def _parse_result(
    round_id: int, reply: dict[str, object], dimension: int | None = None
) -> RoundResult:
    """The :class:`RoundResult` of a ``result`` reply about ``round_id`` (raises as
    :meth:`ChainClient.result`); with ``dimension`` (a vector chain) an ``ok`` result must
    carry ``vector``, a list of exactly that many finite numbers."""
    raw = {key: value for key, value in reply.items() if key not in _FRAME_KEYS}
    status = raw.get("status")
    if status == "aborted":
        raise RoundAborted(f"round {round_id} was aborted")
    if status != "ok":
        raise RoundFailed(f"round {round_id}: {raw.get('error', f'status {status!r}')}")
    users = get_int(raw, "users", min_value=0)
    estimate = get_float(raw, "estimate")
    vector = None if dimension is None else _vector_field(raw, dimension)
    return RoundResult(round_id, users, estimate, raw, vector)


def _vector_field(raw: dict[str, object], dimension: int) -> tuple[float, ...]:
    """``raw["vector"]`` as a tuple of ``dimension`` finite floats (MalformedFrame else)."""
    value = raw.get("vector")
    if not isinstance(value, list | tuple) or len(value) != dimension:
        raise MalformedFrame(f"the result's vector is not a list of {dimension} numbers")
    out: list[float] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise MalformedFrame("the result's vector holds a value that is not a number")
        number = float(item)
        if not math.isfinite(number):
            raise MalformedFrame("the result's vector holds a value that is not finite")
        out.append(number)
    return tuple(out)


def _first_leaf(errors: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception of a (possibly nested) exception group."""
    first = errors.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


@contextlib.asynccontextmanager
async def connect(chain: str | Path | CloakChain, **kwargs: Any) -> AsyncIterator[ChainClient]:
    """Open a :class:`ChainClient` for a chain file (or a loaded
    :class:`~cloaknet.chainfile.CloakChain`); ``kwargs`` go to :class:`ChainClient` (e.g.
    ``credential=Path("client.key")`` and ``token=...`` on a chain with ``[admission]``).
    The client is closed when the block ends.

    :raises ChainFileError: the chain file is unreadable or invalid.
    :raises TypeError, ValueError, KeyFileError: as :class:`ChainClient`.
    """
    loaded = chain if isinstance(chain, CloakChain) else load_chain(chain)
    client = ChainClient(loaded, **kwargs)
    try:
        yield client
    finally:
        await client.aclose()
