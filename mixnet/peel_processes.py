"""Peeling in worker processes: a mix node's pool of :mod:`mixnet.peel_worker` children.

:class:`PeelProcesses` runs a :class:`~mixnet.peel_job.PeelJob` on a list of items in one of
``count`` worker processes and returns exactly what :func:`mixnet.onion.peel_many` would
(``split`` entries per item, errors in place). The items that cannot be peeled (wrong type
or length) never leave the node; the others travel as one buffer over the worker's standard
input, with the round's secret key, and the opened contents come back over its standard
output (:mod:`mixnet.peel_job`). All I/O is on the node's event loop; a worker does one job
at a time and a job waits for a free worker.

A worker that dies (killed, out of memory) fails the jobs it held with
:class:`~mixnet.errors.InternalError` — the machine treats that like a failed peel in a
thread, so a chunk is asked for again — and is replaced at once. A job whose awaiting task is
cancelled leaves its worker in the middle of an answer, so that worker is replaced too.
Workers end with their input: when the pool is closed, when the node stops, and when the node
dies (the kernel closes its end of the pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import mixnet
from mixnet.core.items import Items
from mixnet.errors import InternalError, MixnetError
from mixnet.peel_job import ERRORS, FRAME_HEADER, PeelJob, decode_response, encode_request

__all__ = ["PeelProcesses", "pack_items", "unpack_results"]

log = logging.getLogger("mixnet.peel")

#: Seconds :meth:`PeelProcesses.close` waits for a worker to exit after closing its input,
#: before it kills it.
CLOSE_WAIT = 5.0
#: The worker's program: the package this node runs is found where the node found it, after
#: the interpreter's own paths (so nothing there can stand in for a standard module).
_ROOT = str(Path(mixnet.__file__).resolve().parent.parent)
_BOOT = (
    f"import sys; sys.path.append({_ROOT!r}); "
    "from mixnet.peel_worker import main; sys.exit(main())"
)
#: Longest wait, in seconds, between attempts to start a worker that replaces one.
RESPAWN_CAP = 30.0
#: The size asked for each pipe to and from a worker (Linux allows up to 1 MiB by default).
PIPE_BYTES = 1 << 20
#: The read buffer of a worker's output (a response is read in one piece up to this size).
_READ_LIMIT = 1 << 22


def pack_items(
    job: PeelJob, items: Sequence[bytes]
) -> tuple[bytes, list[int], dict[int, MixnetError]]:
    """Split ``items`` into what a worker can peel and what it must not see.

    Returns the peelable items concatenated (each ``bytes`` of ``job.expected_length``), their
    indices in ``items`` (ascending), and for every other index the error
    :func:`~mixnet.onion.peel_many` gives it (:class:`BadLength`, found without cryptography).
    :class:`~mixnet.core.items.Items` of the expected width are copied out in one piece.
    """
    size = job.expected_length
    if isinstance(items, Items) and items.width == size:
        return items.tobytes(), list(range(len(items))), {}
    good: list[int] = []
    bad: dict[int, MixnetError] = {}
    odd: list[int] = []
    for index, item in enumerate(items):
        if type(item) is bytes and len(item) == size:
            good.append(index)
        else:
            odd.append(index)
    if odd:
        errors = job([items[i] for i in odd])  # only length and type checks: no crypto
        for k, index in enumerate(odd):
            error = errors[k * job.split]
            assert isinstance(error, MixnetError)
            bad[index] = error
        blob = b"".join(items[i] for i in good)
    else:
        blob = b"".join(items)
    return blob, good, bad


def unpack_results(
    job: PeelJob,
    count: int,
    good: Sequence[int],
    bad: Mapping[int, MixnetError],
    opened: bytes,
    failures: Sequence[tuple[int, str, str]],
) -> Sequence[bytes | MixnetError]:
    """What :func:`~mixnet.onion.peel_many` returns for ``count`` items, from
    :func:`pack_items`' ``good`` and ``bad`` and a worker's answer for the ``good`` ones:
    ``job.split`` entries per item, in order — as :class:`~mixnet.core.items.Items` over the
    answer's buffer (no object per item) when every item opened and ``job.split`` is 1 (a
    relay's chunk; the entry mix's boxes, cut in ``m``, stay a list).

    :raises ValueError: the answer does not fit the request (a worker's fault).
    """
    if len(good) + len(bad) != count:
        raise ValueError(f"{len(good)} items sent and {len(bad)} refused are not {count}")
    failed: dict[int, MixnetError] = {}
    for index, name, message in failures:
        if not 0 <= index < len(good) or index in failed:
            raise ValueError(f"a peel response names item {index} of {len(good)}")
        failed[index] = ERRORS.get(name, InternalError)(message)
    content, width, split = job.content_length, job.width, job.split
    if len(opened) != (len(good) - len(failed)) * content:
        raise ValueError("a peel response's contents do not fit the items that opened")
    if not bad and not failed and width > 0:
        if split == 1:
            return Items.from_bytes(opened, width)
        return [opened[i : i + width] for i in range(0, len(opened), width)]  # every box opened
    out: list[bytes | MixnetError] = []
    extend = out.extend
    at = 0
    position = 0
    for index in range(count):
        error = bad.get(index)
        if error is None:
            error = failed.get(position)
            position += 1
            if error is None:
                if split == 1:
                    out.append(opened[at : at + content])
                else:
                    extend(opened[i : i + width] for i in range(at, at + content, width))
                at += content
                continue
        extend([error] * split)
    return out


def _widen_pipe(stream: asyncio.StreamWriter | asyncio.StreamReader | None) -> None:
    """Grow the pipe under ``stream`` to :data:`PIPE_BYTES` where the system allows (Linux,
    up to ``/proc/sys/fs/pipe-max-size``), so a chunk crosses in a few system calls rather
    than one per 64 KiB; otherwise leave it."""
    transport = getattr(stream, "transport", None) or getattr(stream, "_transport", None)
    pipe = None if transport is None else transport.get_extra_info("pipe")
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or setter is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), setter, PIPE_BYTES)


class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self, number: int, process: asyncio.subprocess.Process) -> None:
        self.number = number
        self.process = process

    async def ask(self, body: bytes) -> tuple[bytes, list[tuple[int, str, str]]]:
        """Send one request body and read its response.

        :raises InternalError: the worker exited, or answered something unreadable.
        """
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(FRAME_HEADER.pack(len(body)))
            stdin.write(body)
            await stdin.drain()
            (size,) = FRAME_HEADER.unpack(await stdout.readexactly(FRAME_HEADER.size))
            return decode_response(await stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            status = self.process.returncode
            raise InternalError(
                f"peel worker {self.number} (pid {self.process.pid}) exited"
                + ("" if status is None else f" with status {status}")
                + f": {type(exc).__name__}"
            ) from None
        except ValueError as exc:
            raise InternalError(f"peel worker {self.number} answered badly: {exc}") from None

    async def stop(self, wait: float) -> None:
        """Close the worker's input and wait up to ``wait`` seconds for it to exit; kill it
        if it does not."""
        process = self.process
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), wait)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class PeelProcesses:
    """``count`` worker processes that peel (see the module docstring). Use from one event
    loop: :meth:`start`, then :meth:`run` any number of times, then :meth:`close`.

    ``name`` labels the workers in logs (the node's name).

    :raises ValueError: ``count`` below 1.
    """

    def __init__(self, count: int, *, name: str = "mixnet") -> None:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"need at least one peel worker, got {count!r}")
        self.count = count
        self.name = name
        #: workers started to replace one that died or was abandoned (for tests and logs)
        self.replaced = 0
        self._idle: asyncio.Queue[_Worker] | None = None
        self._workers: set[_Worker] = set()
        self._replacing: set[asyncio.Task[None]] = set()
        self._numbers = 0
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """The process ids of the live workers (one that died is left out once it has been
        reaped, which the event loop does at once)."""
        return sorted(w.process.pid for w in self._workers if w.process.returncode is None)

    async def start(self) -> None:
        """Start the workers (about 0.1 s each, side by side).

        :raises OSError: a worker process cannot be started.
        """
        if self._idle is not None:
            raise RuntimeError("the peel workers are already started")
        self._idle = asyncio.Queue()
        workers = await asyncio.gather(*(self._spawn() for _ in range(self.count)))
        for worker in workers:
            self._idle.put_nowait(worker)

    async def _spawn(self) -> _Worker:
        self._numbers += 1
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",  # no working directory in front of the standard library
            "-c",
            _BOOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_READ_LIMIT,
        )
        for stream in (process.stdin, process.stdout):
            _widen_pipe(stream)
        worker = _Worker(self._numbers, process)
        self._workers.add(worker)
        return worker

    async def run(self, job: PeelJob, items: Sequence[bytes]) -> Sequence[bytes | MixnetError]:
        """``job(items)``, computed in a worker: ``job.split`` entries per item, in order
        (:func:`unpack_results`: :class:`~mixnet.core.items.Items` when
        every item of a relay's chunk opened).

        :raises InternalError: the worker died or answered something that does not fit
            (it is replaced; the job may be asked again).
        :raises RuntimeError: not started, or closed.
        """
        if self._idle is None or self._closed:
            raise RuntimeError("the peel workers are not running")
        worker = await self._idle.get()
        try:
            blob, good, bad = pack_items(job, items)
            if good:
                opened, failures = await worker.ask(encode_request(job, blob))
                del blob
                results = unpack_results(job, len(items), good, bad, opened, failures)
            else:
                results = unpack_results(job, len(items), good, bad, b"", [])
        except BaseException as exc:
            self._replace(worker)
            if isinstance(exc, ValueError):
                raise InternalError(f"peel worker {worker.number}: {exc}") from None
            raise
        self._idle.put_nowait(worker)
        return results

    def _replace(self, worker: _Worker) -> None:
        """Retire ``worker`` (it died, or holds half an answer) and start another."""
        self._workers.discard(worker)
        if self._closed:
            return
        log.warning("%s: replacing peel worker %d", self.name, worker.number)
        task = asyncio.get_running_loop().create_task(self._swap(worker))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _swap(self, old: _Worker) -> None:
        with contextlib.suppress(ProcessLookupError):
            old.process.kill()
        await old.process.wait()
        delay = 1.0
        while not self._closed:
            try:
                fresh = await self._spawn()
            except OSError as exc:  # e.g. out of processes or memory: try again later
                log.error("%s: cannot start a peel worker (again in %.0f s): %s",
                          self.name, delay, exc)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(2 * delay, RESPAWN_CAP)
                continue
            if self._closed:
                self._workers.discard(fresh)
                await fresh.stop(CLOSE_WAIT)
                return
            self.replaced += 1
            assert self._idle is not None
            self._idle.put_nowait(fresh)
            return

    async def close(self) -> None:
        """Stop every worker (its input closed; killed after :data:`CLOSE_WAIT` seconds).
        Jobs still waiting for a worker wait forever: cancel them first. Idempotent."""
        self._closed = True
        for task in list(self._replacing):
            task.cancel()
        await asyncio.gather(*self._replacing, return_exceptions=True)
        workers = list(self._workers)
        self._workers.clear()
        await asyncio.gather(*(w.stop(CLOSE_WAIT) for w in workers))
