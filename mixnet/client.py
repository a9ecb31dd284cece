"""A generic mixnet client: find the entry mix's round, verify its keys, submit onions.

::

    async with MixnetClient(config, messages=m, payload_length=w, sink_url=url) as client:
        receipt = await client.submit(lambda: make_my_payloads())
        reply = await client.sink_request({"type": "subscribe", "round": receipt.round_id})

The client knows nothing about what the payloads mean: a submission is exactly ``messages``
opaque payloads of ``payload_length`` bytes each. :meth:`MixnetClient.submit`

1. asks the entry mix for its open round (``get-round``) and checks every mix's signed round
   key against the identity key in the chain configuration, in chain order
   (:meth:`MixnetClient.current_round`);
2. wraps each payload in one onion layer per mix after the first and seals the onions
   together in one box for the entry mix (:func:`mixnet.onion.wrap_submission`, in a thread
   pool), and sends ``submit {round, client, box}``; given a client key (a chain with
   ``[admission]``) it also sends ``credential`` (the key's public half, which is then the
   client id), ``signature`` (over the chain, the round and the box's digest,
   :func:`mixnet.admission.sign_submission`) and its issuer ``token`` if it has one;
3. on connection loss resends the *identical* frame (the entry mix acknowledges an exact
   retry again without counting it twice); if the round closed first (``round-closed`` /
   ``unknown-round``) it asks for fresh payloads and tries the next round.

It returns once the entry mix has acknowledged — i.e. durably stored — the submission. With a
:class:`~mixnet.journal.SubmissionJournal` each frame is on disk before it is sent, so a
client restarted before the receipt resends the identical frame and learns whether it was
counted, instead of counting the value twice (:mod:`mixnet.journal`).
"""

from __future__ import annotations

import asyncio
import math
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

from nacl.signing import SigningKey

from mixnet.admission import (
    TOKEN_LENGTH,
    credential_client_id,
    sign_submission,
)
from mixnet.chain import ChainConfig
from mixnet.core import submission_digest
from mixnet.errors import (
    BadLength,
    BadSignature,
    InternalError,
    LinkClosed,
    MalformedFrame,
    MixnetError,
    RoundClosed,
    UnknownRound,
    WrongCount,
)
from mixnet.frames import MAX_CLIENT_ID_LENGTH, ROUND_ID_MAX, Submit, parse_announcements
from mixnet.journal import KeptSubmission, OutcomeUnknown, SubmissionJournal
from mixnet.link import Backoff, Link
from mixnet.onion import wrap_submission
from mixnet.submit_many import RECEIPTS, parse_receipts, submit_many_frame
from mixnet.tls import TlsError
from mixnet.wire import get_float, get_int, get_str

__all__ = [
    "MAX_REPLY",
    "MixnetClient",
    "ParameterMismatch",
    "Receipt",
    "RoundInfo",
    "send_submission",
    "send_submissions",
]

#: Largest reply frame accepted from the entry mix or the sink, in bytes (default).
MAX_REPLY = 1 << 20

_DEFAULT_BACKOFF = Backoff()


class ParameterMismatch(MixnetError):
    """The entry mix runs rounds of another shape (``messages`` or ``payload_length``) than
    this client was made for: the chain configuration and the nodes disagree."""

    code = "parameter-mismatch"


@dataclass(frozen=True)
class RoundInfo:
    """An open round whose keys were verified: ``round_id``, its ``deadline`` (unix seconds,
    the entry mix's clock) and the mixes' X25519 round ``public_keys`` (32 bytes each) in
    chain order (entry mix first)."""

    round_id: int
    deadline: float
    public_keys: tuple[bytes, ...]


@dataclass(frozen=True)
class Receipt:
    """The entry mix's acknowledgement: the round the submission went into, the client id
    used, and ``digest`` = :func:`mixnet.core.submission_digest` of the accepted box."""

    round_id: int
    client_id: str
    digest: bytes


def _check_client_id(client_id: str | None) -> str:
    if client_id is None:
        return secrets.token_hex(16)
    if not isinstance(client_id, str):
        raise TypeError(f"client_id must be str, not {type(client_id).__name__}")
    if not 0 < len(client_id) <= MAX_CLIENT_ID_LENGTH or not client_id.isprintable():
        raise ValueError(
            f"client_id must be 1..{MAX_CLIENT_ID_LENGTH} printable characters (as the entry "
            "mix checks)"
        )
    return client_id


class MixnetClient:
    """A client of one chain; safe for many concurrent submissions from one event loop.

    ``messages`` payloads of ``payload_length`` bytes make one submission. ``connections``
    websockets to the entry mix (``config.mixes[0].url``) share the submissions round-robin;
    one more goes to ``sink_url``. ``retry_for`` (seconds) bounds both how long a request
    retries connection failures and how long :meth:`submit` keeps trying new rounds.
    ``workers`` sizes the wrapping thread pool (``None``: the executor's default).
    ``backoff`` spaces retries; ``max_reply`` bounds reply frames in bytes.

    ``signing_key`` is the client's Ed25519 key on a chain with ``[admission]``: every
    submission then carries its public half as ``credential`` (and as the client id), a
    signature over (chain id, round, onion digest) and ``token`` (72 bytes,
    :func:`mixnet.admission.issue_token`) when given — the issuer's admission of this key.
    The entry mix takes one submission per credential per round.

    ``journal`` keeps each ``submit`` frame on disk from before it is sent until the entry
    mix answers it (:mod:`mixnet.journal`); :meth:`submit` then needs a stable client id.
    The client does not close it.

    ``wss://`` connections trust the chain's CA bundle (``config.tls``, the chain file's
    ``[tls]``), or the system's CAs without one; a certificate they do not trust, or a
    node that does not speak TLS, fails the request at once with
    :class:`~mixnet.tls.TlsError` (it is not retried).

    Construction opens nothing; call :meth:`aclose` (or use ``async with``) when done.
    Raises ``ValueError`` for non-positive ``messages``/``connections``, a negative
    ``payload_length``, a negative or non-finite ``retry_for``, or a ``token`` that is not
    72 bytes or comes without a ``signing_key``; ``TypeError`` for a ``signing_key`` that
    is not a :class:`~nacl.signing.SigningKey`; and :class:`~mixnet.tls.TlsError` if the
    CA bundle cannot be read.
    """

    def __init__(
        self,
        config: ChainConfig,
        *,
        messages: int,
        payload_length: int,
        sink_url: str,
        connections: int = 4,
        retry_for: float = 60.0,
        workers: int | None = None,
        backoff: Backoff = _DEFAULT_BACKOFF,
        max_reply: int = MAX_REPLY,
        signing_key: SigningKey | None = None,
        token: bytes | None = None,
        journal: SubmissionJournal | None = None,
    ) -> None:
        if journal is not None and not isinstance(journal, SubmissionJournal):
            raise TypeError(f"journal must be a SubmissionJournal, not {type(journal).__name__}")
        if signing_key is not None and not isinstance(signing_key, SigningKey):
            raise TypeError(
                f"signing_key must be a SigningKey, not {type(signing_key).__name__}"
            )
        if token is not None:
            if signing_key is None:
                raise ValueError("an admission token needs the client's signing_key")
            if not isinstance(token, bytes) or len(token) != TOKEN_LENGTH:
                raise ValueError(f"an admission token must be {TOKEN_LENGTH} bytes")
        if messages < 1:
            raise ValueError(f"messages must be >= 1, got {messages}")
        if payload_length < 0:
            raise ValueError(f"payload_length must be >= 0, got {payload_length}")
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        if not (math.isfinite(retry_for) and retry_for >= 0):
            raise ValueError(f"retry_for must be a finite number >= 0, got {retry_for}")
        self.config = config
        self.messages = messages
        self.payload_length = payload_length
        self.retry_for = retry_for
        self.backoff = backoff
        self.signing_key = signing_key
        self.token = token
        self.journal = journal
        #: the client's credential (its public key), ``None`` without a signing key
        self.credential = None if signing_key is None else bytes(signing_key.verify_key)
        entry_url = config.mixes[0].url
        context = None if config.tls is None else config.tls.client_context()
        self._entry = [
            Link(
                entry_url,
                max_size=max_reply,
                name=f"client->{config.mixes[0].name}",
                retry_for=retry_for,
                backoff=backoff,
                ssl_context=context,
            )
            for _ in range(connections)
        ]
        self._next = 0
        self._sink = Link(
            sink_url,
            max_size=max_reply,
            name="client->sink",
            retry_for=retry_for,
            backoff=backoff,
            ssl_context=context,
        )
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mixnet-wrap")
        self._round: RoundInfo | None = None
        self._round_lock = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def aclose(self) -> None:
        """Close every link and the thread pool. Idempotent; later requests raise
        :class:`~mixnet.errors.LinkClosed`."""
        self._closed = True
        for link in (*self._entry, self._sink):
            await link.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> MixnetClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise LinkClosed("the mixnet client is closed")

    def _pick(self) -> Link:
        link = self._entry[self._next % len(self._entry)]
        self._next += 1
        return link

    # ------------------------------------------------------------------ rounds

    async def current_round(self, *, refresh: bool = False) -> RoundInfo:
        """The entry mix's open round, verified; cached until ``refresh`` (or until a
        submission finds it closed).

        :raises ParameterMismatch: the round's ``messages``/``payload_length`` differ from
            this client's.
        :raises BadSignature: the announcements are not, in chain order, one per mix of the
            chain configuration, each for this round and signed by that mix's identity key.
        :raises MalformedFrame: the reply (or an announcement in it) is malformed.
        :raises UnknownRound: the entry mix has no open round (yet).
        :raises MixnetError: another error frame from the entry mix.
        :raises TlsError: the entry mix's TLS certificate is not trusted, or it does not
            speak TLS (not retried).
        :raises OSError, ConnectionClosed, InvalidHandshake, TimeoutError: the entry mix was
            unreachable for ``retry_for`` seconds.
        """
        self._check_open()
        async with self._round_lock:
            if self._round is None or refresh:
                self._round = None
                self._round = await self._fetch_round()
            return self._round

    async def _round_after(self, refused: RoundInfo | None) -> RoundInfo:
        """The cached round, unless it is ``refused`` (then a fresh one): concurrent
        submissions that find the same round closed ask the entry mix only once."""
        async with self._round_lock:
            if self._round is None or (refused is not None and self._round == refused):
                self._round = None
                self._round = await self._fetch_round()
            return self._round

    async def _fetch_round(self) -> RoundInfo:
        reply = await self._pick().request({"type": "get-round"}, expect="round")
        return self.verify_round(reply)

    def verify_round(self, reply: Mapping[str, object]) -> RoundInfo:
        """Check a ``round`` reply of the entry mix against the chain configuration and
        return the verified :class:`RoundInfo` (errors as for :meth:`current_round`)."""
        config = self.config
        round_id = get_int(reply, "round", min_value=0, max_value=ROUND_ID_MAX)
        messages = get_int(reply, "messages")
        payload_length = get_int(reply, "payload_length")
        if (messages, payload_length) != (self.messages, self.payload_length):
            raise ParameterMismatch(
                f"the entry mix runs rounds of {messages} payloads of {payload_length} bytes; "
                f"this client makes {self.messages} of {self.payload_length}"
            )
        deadline = get_float(reply, "deadline")
        raw = reply.get("announcements")
        if isinstance(raw, list) and len(raw) != len(config.mixes):
            raise BadSignature(
                f"expected {len(config.mixes)} round key announcements, got {len(raw)}"
            )
        anns = parse_announcements(reply, chain_id=config.chain_id, max_count=len(config.mixes))
        for hop, (ann, mix) in enumerate(zip(anns, config.mixes, strict=True)):
            if ann.node != mix.name:
                raise BadSignature(
                    f"round key {hop} comes from {ann.node!r}, expected {mix.name!r} "
                    "(the chain's mixes in order)"
                )
            if ann.round_id != round_id:
                raise BadSignature(
                    f"round key of {mix.name!r} is for round {ann.round_id}, not {round_id}"
                )
            if mix.identity is None:  # ChainConfig forbids it; never encrypt to an unsigned key
                raise BadSignature(f"the chain configuration has no identity for {mix.name!r}")
            ann.verify(mix.identity)
        return RoundInfo(round_id, deadline, tuple(a.public_key for a in anns))

    # ------------------------------------------------------------------ submit

    def wrap(self, payloads: Sequence[bytes], info: RoundInfo) -> bytes:
        """The submission box of ``payloads`` for round ``info`` (CPU-bound: :meth:`submit`
        runs it in the thread pool).

        :raises WrongCount: not exactly ``messages`` payloads.
        :raises BadLength: a payload is not ``bytes`` of ``payload_length``.
        """
        if len(payloads) != self.messages:
            raise WrongCount(f"expected {self.messages} payloads, got {len(payloads)}")
        for index, payload in enumerate(payloads):
            if not isinstance(payload, bytes) or len(payload) != self.payload_length:
                raise BadLength(f"payload {index} must be {self.payload_length} bytes")
        return wrap_submission(
            payloads, info.public_keys, chain_id=self.config.chain_id, round_id=info.round_id,
            proven=self.config.ownership_proofs,
        )  # fmt: skip

    async def submit(
        self, make_payloads: Callable[[], Sequence[bytes]], *, client_id: str | None = None
    ) -> Receipt:
        """Submit one client's payloads; returns once the entry mix has stored them.

        ``make_payloads()`` (called on the event loop thread; its exceptions propagate)
        gives the ``messages`` payloads. It is called once per round tried, so an application
        may encode afresh for each round. Within a round, a connection loss resends the
        identical box, which the entry mix acknowledges without counting them twice. If
        the round is closed or unknown by the time the submission arrives, the client waits a
        capped, jittered backoff, fetches the next round and calls ``make_payloads()`` again,
        for up to ``retry_for`` seconds. ``client_id`` defaults to ``secrets.token_hex(16)``;
        with a ``signing_key`` it is the credential's text
        (:func:`mixnet.admission.credential_client_id`) and may not be anything else, and
        each attempt is signed for its round.

        With a ``journal``, ``client_id`` must be given (a stable id for this value; with a
        signing key, the credential's text is), and a frame the journal still holds for it —
        sent before a restart, never answered — is resent first, identical: if the entry mix
        stored it, its receipt is returned and nothing else is sent; if its round is closed
        without it, the value is submitted afresh; if the entry mix no longer knows that
        round, :class:`~mixnet.journal.OutcomeUnknown` is raised and the frame stays kept.
        Every frame is kept before it is sent and forgotten once the entry mix has answered
        it (acknowledged or refused); after a connection failure it stays.

        Error policy: ``internal-error`` (the entry mix could not store the submission) is
        answered by resending the identical frame after a backoff, until ``retry_for``; every
        other :class:`~mixnet.errors.MixnetError` but ``round-closed`` and ``unknown-round``
        is re-raised as is — its class and ``code`` are those of the entry mix's error frame
        (e.g. :class:`~mixnet.errors.DuplicateClient`), or of the local check that failed.
        Nothing is wrapped.

        :raises ValueError, TypeError: ``client_id`` is not a str of 1..128 characters, or
            (with a ``signing_key``) not the credential's text; or it is missing with a
            ``journal``.
        :raises OutcomeUnknown: (with a ``journal``) see above.
        :raises JournalError: the journal cannot be written (nothing was sent).
        :raises WrongCount, BadLength: ``make_payloads()`` returned the wrong shape.
        :raises RoundClosed, UnknownRound: rounds kept closing for ``retry_for`` seconds.
        :raises ParameterMismatch, BadSignature, MalformedFrame: see :meth:`current_round`.
        :raises MixnetError: the entry mix refused the submission (not retried).
        :raises LinkClosed: the client was closed.
        :raises TlsError: the entry mix's TLS certificate is not trusted, or it does not
            speak TLS (not retried).
        :raises OSError, ConnectionClosed, InvalidHandshake, TimeoutError: the entry mix was
            unreachable for ``retry_for`` seconds.
        """
        if self.journal is not None and client_id is None and self.credential is None:
            raise ValueError("with a journal, submit needs a stable client_id for the value")
        client = self._client_id(client_id)
        link = self._pick()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_for
        if self.journal is not None:
            resumed = await self._resume(link, client, give_up)
            if resumed is not None:
                return resumed
        refused: RoundInfo | None = None
        attempt = 0
        while True:
            self._check_open()
            info: RoundInfo | None = None
            try:
                info = await self._round_after(refused)
                payloads = make_payloads()
                box, digest, signature = await self._seal_in_pool(payloads, info)
                signed = signature is not None
                kept = KeptSubmission(
                    client, info.round_id, box, self.credential if signed else None, signature,
                    self.token if signed else None,
                )  # fmt: skip
                if self.journal is not None:
                    await asyncio.to_thread(self.journal.keep, kept)
                await self._send_kept(link, kept, give_up)
            except (RoundClosed, UnknownRound):
                if loop.time() >= give_up:
                    raise
                if info is not None:
                    refused = info
                await asyncio.sleep(self.backoff.delay(attempt))
                attempt += 1
                continue
            return Receipt(info.round_id, client, digest)
    async def _send_kept(
        self, link: Link, kept: KeptSubmission, give_up: float, *, resuming: bool = False
    ) -> None:
        """:func:`send_submission` of ``kept``'s frame, then forget it in the journal once the
        entry mix has answered: acknowledged, or refused (then it was not stored). A failure
        to get an answer (connection, TLS, the client closed) leaves it kept, and so does
        ``unknown-round`` when ``resuming`` a frame sent before (its outcome is unknown)."""
        try:
            await send_submission(
                link, kept.frame(), round_id=kept.round_id, client=kept.client,
                give_up=give_up, backoff=self.backoff,
            )  # fmt: skip
        except MixnetError as exc:
            unanswered = isinstance(exc, LinkClosed | TlsError) or (
                resuming and isinstance(exc, UnknownRound)
            )
            if self.journal is not None and not unanswered:
                await asyncio.to_thread(self.journal.discard, kept.client)
            raise
        if self.journal is not None:
            await asyncio.to_thread(self.journal.discard, kept.client)

    async def _resume(self, link: Link, client: str, give_up: float) -> Receipt | None:
        """Resend the frame the journal keeps for ``client``, if any: its receipt if it was
        stored; ``None`` (and the frame forgotten) if its round is closed without it.

        :raises OutcomeUnknown: the entry mix no longer knows its round.
        """
        assert self.journal is not None
        kept = await asyncio.to_thread(self.journal.get, client)
        if kept is None:
            return None
        try:
            await self._send_kept(link, kept, give_up, resuming=True)
        except RoundClosed:
            return None  # never counted: the caller submits afresh
        except UnknownRound:
            raise OutcomeUnknown(
                f"the entry mix no longer knows round {kept.round_id}, which client "
                f"{client!r}'s kept submission was sent into: whether it was counted cannot "
                "be told (the journal keeps it)"
            ) from None
        return Receipt(kept.round_id, client, submission_digest(kept.box))

    def _client_id(self, client_id: str | None) -> str:
        """The client id of a submission (see :meth:`submit`)."""
        if self.credential is None:
            return _check_client_id(client_id)
        own = credential_client_id(self.credential)
        if client_id is not None and client_id != own:
            raise ValueError("with a signing key the client id is the key's credential text")
        return own

    async def _seal_in_pool(
        self, payloads: Sequence[bytes], info: RoundInfo
    ) -> tuple[bytes, bytes, bytes | None]:
        """The submission box, its digest and (with a signing key) the submission's signature,
        computed in the thread pool; :class:`LinkClosed` if :meth:`aclose` shut the pool
        down first or meanwhile."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self._seal, payloads, info)
        except (RuntimeError, asyncio.CancelledError):
            task = asyncio.current_task()
            if self._closed and (task is None or task.cancelling() == 0):
                raise LinkClosed("the mixnet client was closed") from None
            raise

    def _seal(
        self, payloads: Sequence[bytes], info: RoundInfo
    ) -> tuple[bytes, bytes, bytes | None]:
        box = self.wrap(payloads, info)
        digest = submission_digest(box)
        if self.signing_key is None:
            return box, digest, None
        signature = sign_submission(
            self.signing_key, chain_id=self.config.chain_id, round_id=info.round_id, digest=digest
        )
        return box, digest, signature

    # ------------------------------------------------------------------ sink

    async def sink_request(
        self, frame: Mapping[str, object], *, expect: str | Collection[str] | None = None
    ) -> dict[str, object]:
        """Send one frame to the sink and return its reply (``expect``: acceptable reply
        type(s), ``None`` for any). Raises as :meth:`mixnet.link.Link.request`."""
        return await self._sink.request(frame, expect=expect)


async def send_submission(
    link: Link,
    frame: Mapping[str, object],
    *,
    round_id: int,
    client: str,
    give_up: float,
    backoff: Backoff = _DEFAULT_BACKOFF,
) -> None:
    """Send one ``submit`` frame for ``client`` into round ``round_id`` and return once the
    entry mix has acknowledged it: the identical frame is resent after a connection loss
    (by ``link``) and after an ``internal-error`` (the entry mix could not store it; it says
    "submit it again"), after a ``backoff`` delay, until ``give_up`` (event-loop time).

    :raises MalformedFrame: the entry mix acknowledged another submission.
    :raises InternalError: still refused so at ``give_up``.
    :raises MixnetError: any other refusal (e.g. ``round-closed``), at once.
    """
    loop = asyncio.get_running_loop()
    attempt = 0
    while True:
        try:
            reply = await link.request(frame, expect="accepted")
            break
        except InternalError:
            if loop.time() >= give_up:
                raise
            await asyncio.sleep(backoff.delay(attempt))
            attempt += 1
    if (
        get_int(reply, "round", min_value=0) != round_id
        or get_str(reply, "client", max_length=MAX_CLIENT_ID_LENGTH) != client
    ):
        raise MalformedFrame("the entry mix acknowledged another submission")


async def send_submissions(
    link: Link,
    submissions: Sequence[Submit],
    *,
    give_up: float,
    backoff: Backoff = _DEFAULT_BACKOFF,
) -> list[MixnetError | None]:
    """Send ``submissions`` in one ``submit-many`` frame (:mod:`mixnet.submit_many`) and
    return, in order, ``None`` for each the entry mix acknowledged (stored) and the
    :class:`MixnetError` that refused each other one.

    As :func:`send_submission` for each submission: a connection loss resends the identical
    frame (by ``link``; a stored submission is acknowledged again, not counted twice), and
    the submissions refused with ``internal-error`` (the entry mix could not store them) are
    resent together after a ``backoff`` delay until ``give_up`` (event-loop time); what is
    still refused then is returned with that error.

    :raises ValueError: ``submissions`` is empty.
    :raises MalformedFrame: the reply is not a ``receipts`` frame for these submissions.
    :raises MixnetError: the entry mix refused the whole frame (e.g. more submissions than
        its ``[limits].max_submissions_per_frame``).
    """
    loop = asyncio.get_running_loop()
    results: list[MixnetError | None] = [None] * len(submissions)
    todo = list(range(len(submissions)))
    attempt = 0
    while True:
        sent = [submissions[i] for i in todo]
        reply = await link.request(submit_many_frame(sent), expect=RECEIPTS)
        retry = []
        for index, outcome in zip(todo, parse_receipts(reply, sent).results, strict=True):
            results[index] = outcome
            if isinstance(outcome, InternalError):
                retry.append(index)
        if not retry or loop.time() >= give_up:
            return results
        todo = retry
        await asyncio.sleep(backoff.delay(attempt))
        attempt += 1
