"""A peel worker process, started by :class:`mixnet.peel_processes.PeelProcesses` for a mix
node (``python -P -c`` calling :func:`main`; ``python -m mixnet.peel_worker`` runs it too).

It reads requests from standard input and writes one response per request, in order, to
standard output; each a frame of a 4-byte big-endian length and a msgpack body
(:mod:`mixnet.peel_job`). It keeps nothing between requests: the round's secret key comes
with each request and is dropped when the answer is written. It exits with status 0 at the
end of its input (its node closed the pipe, stopped or died) and with status 2, after a line
on standard error, on a request it cannot read — its node is this package, so that is a bug,
not an input to survive.

Why a process and not a thread of the node: libsodium releases the GIL during each X25519
and AEAD call, but every layer also needs a few microseconds of Python (slicing, the key
derivation, the result list). Two peeling threads of one process, or a peeling thread and a
busy event loop, then hand the GIL back and forth at every layer; measured on a 2-core
machine, each layer costs 11% more CPU than in a process of its own (``docs/architecture.md``,
"Peel workers").
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from typing import BinaryIO

from mixnet.errors import MixnetError
from mixnet.peel_job import FRAME_HEADER, PeelJob, decode_request, encode_response

__all__ = ["main", "peel_packed", "serve"]


def peel_packed(job: PeelJob, blob: bytes) -> tuple[bytes, list[tuple[int, str, str]]]:
    """Peel every ``job.expected_length``-byte item of ``blob`` (the worker's side).

    Returns the contents of the layers that opened, concatenated in order
    (``job.content_length`` bytes each), and for each item that did not open its index, error
    class name and message.
    """
    size = job.expected_length
    items = [blob[i : i + size] for i in range(0, len(blob), size)]
    whole = dataclasses.replace(job, split=1)(items)  # whole layers: the node cuts them
    opened: list[bytes] = []
    failures: list[tuple[int, str, str]] = []
    for index, result in enumerate(whole):
        if isinstance(result, MixnetError):
            failures.append((index, type(result).__name__, str(result)))
        else:
            opened.append(result)
    return b"".join(opened), failures


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    """``size`` bytes from ``stream``; ``None`` at the end of the input before the first
    byte. :raises EOFError: the input ended inside the ``size`` bytes."""
    parts: list[bytes] = []
    left = size
    while left:
        part = stream.read(left)
        if not part:
            if left == size:
                return None
            raise EOFError(f"the input ended {left} bytes before the end of a frame")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def serve(source: BinaryIO, sink: BinaryIO) -> int:
    """Answer every request of ``source`` on ``sink`` until ``source`` ends; return the
    number of requests answered.

    :raises ValueError, TypeError, EOFError: a request that cannot be read.
    """
    answered = 0
    while True:
        header = _read_exactly(source, FRAME_HEADER.size)
        if header is None:
            return answered
        (size,) = FRAME_HEADER.unpack(header)
        body = _read_exactly(source, size)
        if body is None:
            raise EOFError("the input ended after a frame's length")
        job, blob = decode_request(body)
        del body
        opened, failures = peel_packed(job, blob)
        del job, blob
        response = encode_response(opened, failures)
        sink.write(FRAME_HEADER.pack(len(response)))
        sink.write(response)
        sink.flush()
        answered += 1


def main() -> int:
    """Serve standard input and output; the exit status (0: the input ended). Ctrl-C in
    the node's terminal reaches its process group: a worker ignores it and ends with its
    input, when the node has stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except (ValueError, TypeError, EOFError) as exc:
        print(f"mixnet.peel_worker: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the node is gone: nobody to answer
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
