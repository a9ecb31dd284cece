"""One peel request, as a value that can run in this process or cross to a worker process.

:class:`PeelJob` is :func:`mixnet.onion.peel_many` with everything but the items bound: the
round's secret key and the layer's place (chain, round, hop, lengths). Called, it peels in the
calling thread. :mod:`mixnet.peel_processes` sends it instead to a worker process
(:mod:`mixnet.peel_worker`) with the items packed into one buffer; this module holds what both
ends of that exchange share (pure functions, no I/O, and nothing that imports numpy, so a
worker stays small):

* :func:`encode_request` / :func:`decode_request` — a job and its packed items (each
  ``expected_length`` bytes, concatenated) as one msgpack body; every frame on the pipes is
  :data:`FRAME_HEADER` (its body's length) and the body;
* :func:`encode_response` / :func:`decode_response` — the opened layers' contents
  concatenated and the failures, each ``(index, error class name, message)``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgpack

from mixnet.errors import BadLength, DecryptionFailed, MixnetError
from mixnet.onion import layer_overhead, peel_many_raw

__all__ = [
    "ERRORS",
    "FRAME_HEADER",
    "PeelJob",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]

#: The length prefix of every request and response frame: a big-endian unsigned 32-bit
#: byte count of the msgpack body that follows.
FRAME_HEADER = struct.Struct(">I")
#: The version of the request and response bodies (both ends are this package).
_VERSION = 1
#: The errors a worker may report for an item, by class name (anything else stands for a
#: bug: the node reads it as an ``InternalError``).
ERRORS: Mapping[str, type[MixnetError]] = {
    "BadLength": BadLength,
    "DecryptionFailed": DecryptionFailed,
}


@dataclass(frozen=True)
class PeelJob:
    """:func:`~mixnet.onion.peel_many` with ``secret_key`` (as its 32 raw bytes ``secret`` and
    its ``public`` key: :func:`~mixnet.onion.peel_many_raw`), ``chain_id``, ``round_id``,
    ``hop_index``, ``expected_length``, ``split`` and ``proven`` bound. The secret never
    appears in ``repr``.

    :raises TypeError, ValueError: on construction, for what ``peel_many`` would refuse
        before touching an item (a key that is not 32 bytes, a length that does not hold
        ``split`` equal items, ...).
    """

    secret: bytes = field(repr=False)
    public: bytes = field(repr=False)
    chain_id: str
    round_id: int
    hop_index: int
    expected_length: int
    split: int = 1
    proven: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.proven, bool):
            raise TypeError(f"proven must be a bool, not {type(self.proven).__name__}")
        self([])  # peel_many checks every argument before it looks at the items

    @property
    def content_length(self) -> int:
        """Bytes of one opened layer's content (``split`` items of :attr:`width`)."""
        return self.expected_length - layer_overhead(self.proven)

    @property
    def width(self) -> int:
        """Bytes of each of the ``split`` items one layer opens into."""
        return self.content_length // self.split

    def __call__(self, items: Sequence[bytes]) -> list[bytes | MixnetError]:
        """``peel_many(items, ...)`` in the calling thread (see that function)."""
        return peel_many_raw(
            items,
            self.secret,
            self.public,
            chain_id=self.chain_id,
            round_id=self.round_id,
            hop_index=self.hop_index,
            expected_length=self.expected_length,
            split=self.split,
            proven=self.proven,
        )


def encode_request(job: PeelJob, blob: bytes) -> bytes:
    """The body of a request: ``job`` and its packed items (``job.expected_length`` bytes
    each, concatenated)."""
    body: bytes = msgpack.packb(
        [
            _VERSION,
            job.secret,
            job.public,
            job.chain_id,
            job.round_id,
            job.hop_index,
            job.expected_length,
            job.split,
            job.proven,
            blob,
        ],
        use_bin_type=True,
    )
    return body


def decode_request(body: bytes) -> tuple[PeelJob, bytes]:
    """The job and packed items of a request body.

    :raises ValueError: the body is not a request of this version (``TypeError`` from
        :class:`PeelJob` for a field of the wrong type).
    """
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError) as exc:
        raise ValueError(f"unreadable peel request: {exc}") from None
    if not isinstance(fields, list) or len(fields) != 10 or fields[0] != _VERSION:
        raise ValueError("not a peel request of version 1")
    _, secret, public, chain_id, round_id, hop, length, split, proven, blob = fields
    if not isinstance(blob, bytes) or not isinstance(length, int) or length <= 0:
        raise ValueError("a peel request's items must be bytes, its length positive")
    if len(blob) % length:
        raise ValueError(f"{len(blob)} bytes of items are not a whole number of {length}")
    job = PeelJob(secret, public, chain_id, round_id, hop, length, split, proven)
    return job, blob


def encode_response(opened: bytes, failures: Sequence[tuple[int, str, str]]) -> bytes:
    """The body of a response (:func:`mixnet.peel_worker.peel_packed`'s result)."""
    body: bytes = msgpack.packb([_VERSION, opened, [list(f) for f in failures]], use_bin_type=True)
    return body


def decode_response(body: bytes) -> tuple[bytes, list[tuple[int, str, str]]]:
    """The opened contents and failures of a response body.

    :raises ValueError: the body is not a response of this version.
    """
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError) as exc:
        raise ValueError(f"unreadable peel response: {exc}") from None
    if (
        not isinstance(fields, list)
        or len(fields) != 3
        or fields[0] != _VERSION
        or not isinstance(fields[1], bytes)
        or not isinstance(fields[2], list)
    ):
        raise ValueError("not a peel response of version 1")
    failures: list[tuple[int, str, str]] = []
    for failure in fields[2]:
        if (
            not isinstance(failure, list)
            or len(failure) != 3
            or not isinstance(failure[0], int)
            or not all(isinstance(x, str) for x in failure[1:])
        ):
            raise ValueError("a peel response's failure is not [index, name, message]")
        failures.append((failure[0], failure[1], failure[2]))
    return fields[1], failures
