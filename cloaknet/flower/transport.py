"""Transports: how a client's update reaches the analyzer, and how the server reads the sum.

A :class:`Transport` has two halves. The client half, :meth:`Transport.submit`, takes the
client's *raw* model update (a float vector of the protocol's dimension d), runs cloaknet's
local randomizer on it — clip to L2 norm C, scale, conditional randomized rounding, the
protocol's distributed Skellam noise, split every coordinate into m shares with its index in
each message (:class:`~cloaknet.protocols.vector.VectorSumProtocol`) — and hands the messages
to the shuffler; it returns a :class:`~cloaknet.flower.records.Receipt`. The server half,
:meth:`Transport.aggregate`, waits for the round's published result: the analyzer's estimate
of Σ_i clip(Δ_i) over the round's users and their count. Nothing else about any single client
is available through it.

Two implementations:

* :class:`ShufflerTransport` (here): the exact ideal shuffler of cloaknet's in-process
  pipeline (:func:`cloaknet.vectorized.shuffle`, a uniformly random permutation from the OS
  CSPRNG, then :meth:`VectorSumProtocol.analyze_integers`). Submissions are pooled in memory
  (one process) or in a spool directory, so that Flower's ClientApp and ServerApp processes on
  one machine can reach it. It is for development: whoever runs :meth:`aggregate` plays the
  trusted shuffler and *could* read a client's pooled messages (which, summed, give that
  client's noisy update). The server-side strategy never does — it only calls
  :meth:`aggregate` — but the guarantee against a curious server needs the chain.
* :class:`~cloaknet.flower.chain.ChainTransport`: the cascade mixnet and the analyzer node,
  through :class:`cloaknet.client.ChainClient`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import CloakError, ParameterError
from cloaknet.flower.records import Receipt, check_round_tag
from cloaknet.protocols.vector import VectorSumProtocol
from cloaknet.protocols.vector_rounding import as_rows
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.vectorized import shuffle

__all__ = [
    "Aggregate",
    "RoundAborted",
    "RoundMismatch",
    "ShufflerTransport",
    "Transport",
    "TransportError",
]

_RESULT: Final[str] = "result.json"
_SUFFIX: Final[str] = ".messages.npy"


class TransportError(CloakError):
    """A transport could not submit an update or produce a round's sum."""


class RoundAborted(TransportError):
    """The round released nothing (e.g. fewer than the protocol's ``min_users`` submitted,
    or the chain aborted it); the server must leave the model unchanged."""


class RoundMismatch(TransportError):
    """The receipts do not describe one round whose result covers them (e.g. the chain
    closed a round between two clients' submissions)."""


@dataclass(frozen=True)
class Aggregate:
    """A round's published result: ``round`` (its tag or chain id), ``users`` (how many
    submissions the analyzer summed), ``total`` (the analyzer's estimate of Σ_i clip(Δ_i),
    float64 of dimension d) and ``raw`` (every published field)."""

    round: str
    users: int
    total: NDArray[np.float64]
    raw: Mapping[str, object] = field(default_factory=dict)


@runtime_checkable
class Transport(Protocol):
    """What :class:`~cloaknet.flower.mod.CloaknetMod` and
    :class:`~cloaknet.flower.strategy.CloaknetFedAvg` need from a transport."""

    @property
    def name(self) -> str:
        """A short name, carried in every receipt."""
        ...

    @property
    def protocol(self) -> VectorSumProtocol:
        """The vector protocol every submission is encoded with (dimension, clip, noise, and
        ``protocol.plan``, the :class:`~cloaknet.fl_accounting.FLPlan` behind the guarantee,
        or ``None`` without noise)."""
        ...

    def submit(self, round_tag: str, update: NDArray[np.float64]) -> Receipt:
        """Encode ``update`` (d raw floats: clipping happens here) and submit it for the
        round ``round_tag`` (transports whose rounds are chosen elsewhere may ignore it);
        returns once the submission is stored.

        :raises InputRangeError: wrong shape or a non-finite value.
        :raises TransportError: the submission was refused.
        """
        ...

    def aggregate(
        self, round_tag: str, receipts: Sequence[Receipt], *, timeout: float
    ) -> Aggregate:
        """The published result of the round the ``receipts`` went into (``round_tag`` is the
        tag the server asked for), waiting up to ``timeout`` seconds.

        :raises RoundAborted: the round released nothing.
        :raises RoundMismatch: the receipts are not all covered by one round's result.
        :raises TransportError, TimeoutError: no result.
        """
        ...


class ShufflerTransport:
    """The exact ideal shuffler, in one process or shared through a spool directory.

    ``protocol`` encodes and analyzes; ``directory`` (``None``: pool in memory, for a ClientApp
    and ServerApp in one process) is created if missing and must be reachable by every client
    process and the server process, and by nobody else (module doc). ``rng`` draws the shares,
    the noise and the permutation (the OS CSPRNG; pass another only in tests).

    Layout: ``<directory>/<round tag>/<random token>.messages.npy`` holds one client's d·m
    message integers (uint64, ``np.save`` format, mode 0600 in directories of mode 0700 —
    when this process creates them —, written to a temporary name and renamed, so a reader
    never sees half a file); ``<round tag>/result.json`` is the published result
    (``round``, ``users``, ``estimate``, ``integer_sums``, ``messages``, ``included``: the
    digests of the submissions summed). Once a round is analyzed its submission files are
    deleted (the shuffler keeps no input after mixing) and later submissions are refused.
    """

    def __init__(
        self,
        protocol: VectorSumProtocol,
        directory: str | os.PathLike[str] | None = None,
        *,
        rng: RandomSource = SYSTEM_RANDOM,
    ) -> None:
        if not isinstance(protocol, VectorSumProtocol):
            raise TypeError(f"protocol must be a VectorSumProtocol, not {type(protocol).__name__}")
        if not isinstance(rng, RandomSource):
            raise TypeError(f"rng must be a RandomSource, not {type(rng).__name__}")
        self._protocol = protocol
        self._rng = rng
        self._directory = None if directory is None else Path(directory)
        if self._directory is not None:
            self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._memory: dict[str, list[tuple[str, NDArray[np.uint64]]]] = {}
        self._results: dict[str, dict[str, object]] = {}

    @property
    def name(self) -> str:
        return "shuffler"

    @property
    def protocol(self) -> VectorSumProtocol:
        return self._protocol

    @property
    def directory(self) -> Path | None:
        """The spool directory, or ``None`` for the in-memory pool."""
        return self._directory

    def __repr__(self) -> str:
        where = "memory" if self._directory is None else str(self._directory)
        return f"ShufflerTransport({self._protocol!r}, {where})"

    # ------------------------------------------------------------------ client half

    def submit(self, round_tag: str, update: NDArray[np.float64]) -> Receipt:
        """:meth:`Transport.submit`: the protocol's local randomizer
        (:meth:`VectorSumProtocol.encode_many`) on ``update``, pooled for ``round_tag``.

        :raises ParameterError: a bad round tag.
        :raises InputRangeError: ``update`` has the wrong shape or a non-finite value.
        :raises RoundAborted: the round was already analyzed.
        """
        tag = check_round_tag(round_tag)
        rows = as_rows(update, self._protocol.dimension)
        if rows.shape[0] != 1:
            raise ParameterError(f"submit takes one update, got {rows.shape[0]}")
        messages = np.ascontiguousarray(self._protocol.encode_many(rows, self._rng)[0])
        digest = hashlib.sha256(messages.tobytes()).hexdigest()
        if self._directory is None:
            with self._lock:
                if tag in self._results:
                    raise RoundAborted(f"round {tag} was already analyzed")
                self._memory.setdefault(tag, []).append((digest, messages))
        else:
            folder = self._directory / tag
            folder.mkdir(mode=0o700, exist_ok=True)
            if (folder / _RESULT).exists():
                raise RoundAborted(f"round {tag} was already analyzed")
            token = secrets.token_hex(16)
            temporary = folder / f".{token}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                np.save(handle, messages, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, folder / f"{token}{_SUFFIX}")
        return Receipt(round=tag, digest=digest, transport=self.name)

    # ------------------------------------------------------------------ server half

    def aggregate(
        self, round_tag: str, receipts: Sequence[Receipt], *, timeout: float = 0.0
    ) -> Aggregate:
        """:meth:`Transport.aggregate`: shuffle every pooled submission of ``round_tag``
        together, analyze, publish and return the result (later calls return the published
        one). ``timeout`` is unused: the pool is complete when every receipt is in.

        :raises ParameterError: a bad round tag.
        :raises RoundMismatch: a receipt names another round or transport, or its digest
            is not among the pooled submissions.
        :raises RoundAborted: fewer than ``min_users`` or more than ``max_users``
            submissions (the pool is discarded: nothing is released).
        """
        tag = check_round_tag(round_tag)
        for receipt in receipts:
            if receipt.round != tag or receipt.transport != self.name:
                raise RoundMismatch(
                    f"receipt for round {receipt.round!r} ({receipt.transport}) in round {tag!r}"
                )
        with self._lock:
            published = self._published(tag)
            if published is None:
                published = self._analyze(tag)
        if published.get("status") != "ok":
            raise RoundAborted(f"round {tag} was aborted: nothing released")
        included = published.get("included")
        if not isinstance(included, list):
            raise TransportError(f"round {tag}: the published result has no 'included' list")
        missing = [r.digest for r in receipts if r.digest not in included]
        if missing:
            raise RoundMismatch(f"round {tag}: {len(missing)} receipt(s) are not in the sum")
        users = published["users"]
        estimate = published["estimate"]
        if not isinstance(users, int) or not isinstance(estimate, list):
            raise TransportError(f"round {tag}: malformed published result")
        return Aggregate(tag, users, np.asarray(estimate, dtype=np.float64), dict(published))

    def _published(self, tag: str) -> dict[str, object] | None:
        if self._directory is None:
            return self._results.get(tag)
        path = self._directory / tag / _RESULT
        if not path.exists():
            return None
        loaded = json.loads(path.read_text())
        if not isinstance(loaded, dict):
            raise TransportError(f"round {tag}: {path} is not a JSON object")
        return loaded

    def _take(self, tag: str) -> list[tuple[str, NDArray[np.uint64]]]:
        """Every pooled submission of ``tag`` (and forget them)."""
        if self._directory is None:
            return self._memory.pop(tag, [])
        folder = self._directory / tag
        pooled: list[tuple[str, NDArray[np.uint64]]] = []
        paths = sorted(folder.glob(f"*{_SUFFIX}")) if folder.is_dir() else []
        for path in paths:
            messages = np.load(path, allow_pickle=False)
            pooled.append((hashlib.sha256(messages.tobytes()).hexdigest(), messages))
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return pooled

    def _publish(self, tag: str, result: dict[str, object]) -> None:
        if self._directory is None:
            self._results[tag] = result
            return
        folder = self._directory / tag
        folder.mkdir(mode=0o700, exist_ok=True)
        temporary = folder / f".{_RESULT}.tmp"
        temporary.write_text(json.dumps(result))
        os.replace(temporary, folder / _RESULT)

    def _analyze(self, tag: str) -> dict[str, object]:
        pooled = self._take(tag)
        users = len(pooled)
        params = self._protocol.params
        if not params.min_users <= users <= params.max_users:
            self._publish(tag, {"round": tag, "status": "aborted", "users": users,
                                "included": []})
            raise RoundAborted(
                f"round {tag}: {users} submission(s), the protocol needs "
                f"{params.min_users}..{params.max_users}; nothing released"
            )
        expected = self._protocol.messages_per_user
        if any(messages.shape != (expected,) for _, messages in pooled):
            raise TransportError(f"round {tag}: a submission does not hold {expected} messages")
        mixed = shuffle(np.concatenate([messages for _, messages in pooled]), self._rng)
        sums = self._protocol.analyze_integers(mixed, users)
        scale = Fraction(params.scale)
        result: dict[str, object] = {
            "round": tag,
            "status": "ok",
            "users": users,
            "estimate": [float(Fraction(v) / scale) for v in sums],
            "integer_sums": sums,
            "scale": params.scale,
            "messages": int(mixed.size),
            "included": sorted(digest for digest, _ in pooled),
        }
        self._publish(tag, result)
        return result
