"""The wrapping half of the load generator (:mod:`cloaknet.loadgen`): a round's verified
keys and protocol (:class:`RoundSpec`), users' values encoded and wrapped into submission
boxes (:func:`wrap_values`, exactly what :meth:`mixnet.client.MixnetClient.wrap` makes), the
tasks the worker processes (or threads) run, and what they return (:class:`WrappedChunk`,
:class:`WrappedRound`). Every random bit comes from the OS CSPRNG in the worker."""

from __future__ import annotations

import math
import multiprocessing
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cloaknet.chainfile import CloakChain
from cloaknet.encoding import check_input, encode_share
from cloaknet.protocols import SummationProtocol
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from mixnet.client import RoundInfo
from mixnet.core import submission_digest
from mixnet.onion import PUBLIC_KEY_LENGTH, onion_length, submission_length, wrap_submission

__all__ = [
    "MAX_CHUNK_USERS",
    "MIN_CHUNK_USERS",
    "TASKS_PER_WORKER",
    "RoundSpec",
    "WrappedChunk",
    "WrappedRound",
    "chunk_sizes",
    "init_worker",
    "pool_context",
    "thread_task",
    "wrap_task",
    "wrap_values",
]

#: Most users per worker task (bounds a task's result and keeps the load balanced).
MAX_CHUNK_USERS = 2048
#: Fewest users per worker task (below this the per-task overhead shows).
MIN_CHUNK_USERS = 16
#: Tasks per worker the users are split into, when the chunk size is not given.
TASKS_PER_WORKER = 8


@dataclass(frozen=True)
class RoundSpec:
    """What a wrapping worker needs, sent to it once (picklable): the chain id, the round
    id and the mixes' verified X25519 round ``public_keys`` in chain order, and the
    ``protocol`` whose local randomizer encodes the values.

    :raises TypeError, ValueError: no keys, a key that is not 32 bytes, or a protocol that
        is not a :class:`~cloaknet.protocols.base.SummationProtocol`.
    """

    chain_id: str
    round_id: int
    public_keys: tuple[bytes, ...]
    protocol: SummationProtocol

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, SummationProtocol):
            raise TypeError(
                f"protocol must be a SummationProtocol, not {type(self.protocol).__name__}"
            )
        if not self.public_keys:
            raise ValueError("a round needs at least one public key")
        for key in self.public_keys:
            if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_LENGTH:
                raise ValueError(f"public keys must be {PUBLIC_KEY_LENGTH} bytes")

    @classmethod
    def for_round(cls, chain: CloakChain, info: RoundInfo) -> RoundSpec:
        """The spec of the verified round ``info`` of ``chain``."""
        return cls(chain.config.chain_id, info.round_id, info.public_keys, chain.protocol)

    @property
    def messages(self) -> int:
        """m, the payloads (inner onions) per user."""
        return self.protocol.message_count

    @property
    def payload_length(self) -> int:
        """Bytes of one plaintext payload."""
        return self.protocol.bytes_per_message

    @property
    def inner_length(self) -> int:
        """Bytes of one inner onion (layers for the mixes after the first) as the entry mix
        takes it out of a box: the item length of hop 1."""
        return onion_length(self.payload_length, len(self.public_keys) - 1)

    @property
    def box_length(self) -> int:
        """Bytes of one user's submission box as the entry mix receives it
        (:func:`mixnet.onion.submission_length`)."""
        return submission_length(self.payload_length, len(self.public_keys), self.messages)


@dataclass(frozen=True)
class WrappedChunk:
    """The submissions of consecutive users, wrapped for one round.

    ``clients`` are their client ids (one per user); ``boxes`` holds every user's
    submission box back to back — user ``i``'s box of ``box_length`` bytes starts at byte
    ``i · box_length``. ``start`` is the index of the first user among the values given to
    the generator. ``cpu_seconds`` is the CPU time the worker spent on this chunk;
    ``worker`` identifies the worker (its process id, or its thread id for a thread) and
    ``worker_cpu_total`` is the worker's CPU time since it started, read when the chunk was
    done.

    :raises ValueError: ``boxes`` does not hold one box of ``box_length`` bytes per client.
    """

    start: int
    clients: tuple[str, ...]
    box_length: int
    boxes: bytes
    cpu_seconds: float = 0.0
    worker: int = 0
    worker_cpu_total: float = 0.0

    def __post_init__(self) -> None:
        if self.box_length < 1 or len(self.boxes) != len(self.clients) * self.box_length:
            raise ValueError("boxes do not hold one box of box_length bytes per client")

    def __len__(self) -> int:
        return len(self.clients)

    def submission(self, index: int) -> bytes:
        """The submission box of the chunk's ``index``-th user (0-based)."""
        if not 0 <= index < len(self.clients):
            raise IndexError(f"user {index} is not in this chunk of {len(self.clients)}")
        base = index * self.box_length
        return self.boxes[base : base + self.box_length]

    def digest(self, index: int) -> bytes:
        """The digest of the ``index``-th user's submission as the entry mix records it
        (:func:`mixnet.core.submission_digest` of the box; a
        :class:`~mixnet.client.Receipt`'s ``digest``)."""
        return submission_digest(self.submission(index))


@dataclass(frozen=True)
class WrappedRound:
    """Every user's submission for one round, in the order of the values, and what wrapping
    them cost: ``wall_seconds`` (from the first task to the last result),
    ``cpu_seconds`` (the workers' CPU on the tasks), ``worker_cpu_seconds`` (the workers'
    whole CPU time, start-up included) and ``workers``."""

    round_id: int
    chunks: tuple[WrappedChunk, ...]
    wall_seconds: float
    cpu_seconds: float
    worker_cpu_seconds: float
    workers: int

    @property
    def users(self) -> int:
        """Number of submissions."""
        return sum(len(chunk) for chunk in self.chunks)


def chunk_sizes(users: int, workers: int, chunk_users: int | None = None) -> list[int]:
    """How ``users`` users are split into worker tasks: ``chunk_users`` each (the last one
    may be smaller), or by default about :data:`TASKS_PER_WORKER` tasks per worker of
    :data:`MIN_CHUNK_USERS` .. :data:`MAX_CHUNK_USERS` users. Sums to ``users``.

    :raises ValueError: ``users < 0``, ``workers < 1`` or ``chunk_users < 1``.
    """
    if users < 0 or workers < 1:
        raise ValueError(f"need users >= 0 and workers >= 1, got {users} and {workers}")
    if chunk_users is None:
        size = math.ceil(users / (workers * TASKS_PER_WORKER)) if users else 1
        size = max(MIN_CHUNK_USERS, min(MAX_CHUNK_USERS, size))
    elif chunk_users < 1:
        raise ValueError(f"chunk_users must be >= 1, got {chunk_users}")
    else:
        size = chunk_users
    full, rest = divmod(users, size)
    return [size] * full + ([rest] if rest else [])


def wrap_values(
    spec: RoundSpec,
    values: Sequence[float],
    *,
    start: int = 0,
    rng: RandomSource = SYSTEM_RANDOM,
) -> WrappedChunk:
    """Encode and wrap one submission per value for the round of ``spec``.

    Each value (a float in [0, 1]) becomes the protocol's ``m`` messages
    (:meth:`~cloaknet.protocols.base.SummationProtocol.encode_many` on the binary64
    values, with ``rng``), each message a fixed-width payload
    (:func:`cloaknet.encoding.encode_share`); the ``m`` payloads make one submission box
    (:func:`mixnet.onion.wrap_submission`: one layer per later mix around each payload,
    one layer for the entry mix around them all; ephemeral keys from the OS CSPRNG).
    Client ids are ``secrets.token_hex(16)``. ``rng`` is the OS CSPRNG unless a test
    injects another; only the encoding uses it.

    :raises InputRangeError: a value is not a number in [0, 1].
    :raises ShareError: the protocol produced a message outside ``[0, modulus)``.
    """
    xs = np.array([float(check_input(v)) for v in values], dtype=np.float64)
    modulus = spec.protocol.message_modulus
    parts: list[bytes] = []
    clients: list[str] = []
    if len(xs):
        encoded = np.asarray(spec.protocol.encode_many(xs, rng)).reshape(len(xs), spec.messages)
        keys = spec.public_keys
        chain_id, round_id = spec.chain_id, spec.round_id
        for row in encoded.tolist():
            clients.append(secrets.token_hex(16))
            payloads = [encode_share(int(value), modulus) for value in row]
            parts.append(wrap_submission(payloads, keys, chain_id=chain_id, round_id=round_id))
    return WrappedChunk(start, tuple(clients), spec.box_length, b"".join(parts))


# --------------------------------------------------------------------------- workers

_WORKER_SPEC: RoundSpec | None = None


def init_worker(spec: RoundSpec) -> None:
    """Pool initializer: keep the round's spec for every task of this worker."""
    global _WORKER_SPEC
    _WORKER_SPEC = spec


def wrap_task(start: int, values: list[float]) -> WrappedChunk:
    """A worker process's task: :func:`wrap_values` for one chunk of the round its
    initializer gave it, with the chunk's CPU time and the worker's total."""
    spec = _WORKER_SPEC
    if spec is None:
        raise RuntimeError("the load generator's worker was not initialized")
    return _timed_wrap(spec, start, values, time.process_time)


def thread_task(spec: RoundSpec, start: int, values: list[float]) -> WrappedChunk:
    """A worker thread's task (``processes=False``): as :func:`wrap_task`, with the
    thread's CPU time (:func:`time.thread_time`)."""
    return _timed_wrap(spec, start, values, time.thread_time)


def _timed_wrap(
    spec: RoundSpec, start: int, values: list[float], clock: Callable[[], float]
) -> WrappedChunk:
    """:func:`wrap_values` with the CPU ``clock`` read around it (see :class:`WrappedChunk`)."""
    begin = clock()
    chunk = wrap_values(spec, values, start=start)
    end = clock()
    return WrappedChunk(
        chunk.start,
        chunk.clients,
        chunk.box_length,
        chunk.boxes,
        cpu_seconds=end - begin,
        worker=os.getpid() if clock is time.process_time else threading.get_ident(),
        worker_cpu_total=end,
    )


def pool_context() -> Any:
    """``forkserver`` where it exists (no fork of a process running threads), else
    ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
