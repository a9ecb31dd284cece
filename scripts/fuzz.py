"""Fuzz a real chain: mutated frames of every type at every node kind.

Starts an in-process chain on 127.0.0.1 (an entry mix, two relays — ``--relays 1`` for one — and
a sink running a trivial summing application, each node with its own sqlite store), with a round
open. Then, for every
node kind (entry, relay, sink) and every frame type of the protocol (``get-round``,
``submit``, ``submit-many``, ``open-round``, ``abort-round``, ``batch``, ``trace``,
``exclude``, ``subscribe``, ``status``, ``challenge``, ``authenticate``) plus unknown types,
it builds a *valid* frame — the predecessor-only frames (``open-round``, ``abort-round``,
``batch``, ``trace``, ``exclude``) both over a plain connection and over one that
authenticated as the node's predecessor with its identity key, so that the parser and the round
machine are reached — mutates it, sends it on a fresh websocket and classifies the outcome:

``typed-error``
    an error frame with a code of :data:`mixnet.errors.ERRORS_BY_CODE` (not ``internal-error``);
``accepted``
    a reply that is not an error;
``untyped-error``
    an ``internal-error`` frame, an unknown code, or a reply that is not a frame;
``closed``
    the node closed the connection as the websocket protocol requires: close code 1009 for a
    message over twice the node's frame limit, 1007 for a text message that is not UTF-8;
``unexpected-close``
    any other close;
``hang``
    no reply within ``--timeout`` seconds;
``crash``
    the node stopped serving: after every frame a fresh connection must get a ``status``
    reply and ``GET /healthz`` must answer 200;
``setup-failed``
    a *valid* exchange that prepares the frame (authentication, ``get-round``, opening a
    fuzzing round) failed.

Afterwards honest clients submit through :class:`mixnet.client.MixnetClient` and the sink's sums
must be exact; every round the fuzzer's own valid submissions (all-zero payloads) went into
must end ``ok`` with exactly the submissions the entry mix acknowledged.

A seeded :class:`random.Random` chooses the mutations (test input only: round keys, onion
layers and identities come from the OS CSPRNG as everywhere else). Frames are of wire version
:data:`mixnet.wire.WIRE_VERSION` and onion format version 2: a ``submit`` carries one ``box``
(:func:`mixnet.onion.wrap_submission`), mutated in its length, its bits, its type, and into
the ``m`` separate onions of format v1. State-changing frames from the authenticated
predecessor only name rounds of the fuzzer's own (ids from 0x7F00…), never one of the chain's
live rounds: the protocol trusts the predecessor to abort rounds.

    .venv/bin/python scripts/fuzz.py [--frames 5000] [--seed 1] [--json PATH]

Exit status 1 if any frame crashed a node, hung, got an untyped error, was closed unexpectedly
or failed its set-up, or if the honest round afterwards is not exact.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from nacl.signing import SigningKey
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

import mixnet.sink
from mixnet.client import MixnetClient
from mixnet.core.actions import DeliveredBatch
from mixnet.core.policy import RoundPolicy
from mixnet.errors import ERRORS_BY_CODE, InternalError, MixnetError
from mixnet.frames import MAX_CLIENT_ID_LENGTH, MAX_NAME_LENGTH, ROUND_ID_MAX
from mixnet.keys import sign_link_challenge
from mixnet.localchain import RunningChain, run_local_chain
from mixnet.node import BaseNode
from mixnet.onion import LAYER_OVERHEAD, wrap, wrap_submission
from mixnet.settings import NodeSettings
from mixnet.sink import SinkNode
from mixnet.store import NodeStore
from mixnet.wire import WIRE_VERSION, decode_frame, encode_frame

HOST = "127.0.0.1"
CHAIN_ID = "fuzz"
#: Bytes of each plaintext payload (a big-endian number for the summing sink).
WIDTH = 4
#: Payloads per submission.
MESSAGES = 2
#: Rounds of the fuzzer's own start here; the chain's live rounds are far below LIVE_MAX.
FUZZ_ROUND_BASE = 0x7F00_0000_0000_0000
LIVE_MAX = 1 << 20
#: Seconds the sink's ``subscribe`` long-poll waits before ``pending`` during the campaign
#: (the node's default is 60 s; a documented long-poll is not a hang).
SUBSCRIBE_WAIT = 0.25
#: Largest reply the fuzzer decodes.
MAX_REPLY = 1 << 26

NODE_KINDS = ("entry", "relay", "sink")
FRAME_TYPES = (
    "get-round",
    "submit",
    "submit-many",
    "open-round",
    "abort-round",
    "batch",
    "trace",
    "exclude",
    "subscribe",
    "status",
    "challenge",
    "authenticate",
    "unknown",
)
PREDECESSOR_ONLY = frozenset({"open-round", "abort-round", "batch", "trace", "exclude"})
UNKNOWN_TYPES = (
    "",
    "foo",
    "round",
    "accepted",
    "round-keys",
    "aborted",
    "batch-ack",
    "accused",
    "excluded",
    "error",
    "result",
    "pending",
    "authenticated",
    "STATUS",
    "Submit",
    "status ",
    "status\x00",
    "get_round",
    "x" * 32,
    "статус",
    "\u202estatus",
)
OUTCOMES = (
    "typed-error",
    "accepted",
    "untyped-error",
    "closed",
    "unexpected-close",
    "hang",
    "crash",
    "setup-failed",
)
FAILURES = frozenset({"untyped-error", "unexpected-close", "hang", "crash", "setup-failed"})
#: Close codes the websocket protocol prescribes: message too big, invalid UTF-8 in a text
#: message.
MESSAGE_TOO_BIG = 1009
INVALID_DATA = 1007


# --------------------------------------------------------------------------- the chain


class SumApp:
    """The sink application: payloads are 4-byte big-endian numbers; the result is their sum,
    and ``ok`` only if the batch holds ``clients * messages == count`` payloads."""

    def __init__(self, messages: int) -> None:
        self.messages = messages

    def analyze(self, round_id: int, batch: DeliveredBatch) -> Mapping[str, object]:
        ok = len(batch.payloads) == batch.clients * self.messages == batch.count
        return {
            "round": round_id,
            "status": "ok" if ok else "error",
            "clients": batch.clients,
            "count": len(batch.payloads),
            "sum": sum(int.from_bytes(p, "big") for p in batch.payloads),
        }

    def aborted(self, round_id: int) -> Mapping[str, object]:
        return {"round": round_id, "status": "aborted"}


FuzzChain = RunningChain


def fuzz_chain(
    directory: Path, *, mixes: int, messages: int, policy: RoundPolicy
) -> contextlib.AbstractAsyncContextManager[RunningChain]:
    """A local chain (mixnet.localchain) whose sink runs :class:`SumApp`."""

    def make_sink(settings: NodeSettings, store: NodeStore) -> SinkNode:
        return SinkNode(settings, store, SumApp(messages))

    return run_local_chain(
        directory,
        make_sink,
        policy,
        messages=messages,
        payload_length=WIDTH,
        mixes=mixes,
        chain_id=CHAIN_ID,
    )


@dataclass(frozen=True)
class Target:
    """One node under test."""

    kind: str  # entry | relay | sink
    node: BaseNode
    name: str
    url: str
    port: int
    hop: int
    predecessor: str | None
    predecessor_key: SigningKey | None
    max_frame: int
    item_length: int


def targets_of(chain: FuzzChain) -> dict[str, list[Target]]:
    out: dict[str, list[Target]] = {k: [] for k in NODE_KINDS}
    for node in [*chain.mixes, chain.sink]:
        s = node.settings
        kind = "sink" if s.is_sink else "entry" if s.hop == 0 else "relay"
        assert node.port is not None
        out[kind].append(
            Target(
                kind=kind,
                node=node,
                name=s.name,
                url=f"ws://{HOST}:{node.port}",
                port=node.port,
                hop=s.hop,
                predecessor=s.predecessor,
                predecessor_key=None if s.predecessor is None else chain.identities[s.predecessor],
                max_frame=s.max_frame(),
                item_length=s.item_length_in(),
            )
        )
    return out


# --------------------------------------------------------------------------- msgpack by hand


class Raw(bytes):
    """Already-encoded msgpack, spliced into a frame as is."""


class Pairs(list[tuple[Any, Any]]):
    """A msgpack map as an ordered list of (key, value) pairs: keys may repeat or be of any
    type."""


def _header(n: int, fix: int, fix_max: int, b16: int, b32: int) -> bytes:
    if n <= fix_max:
        return bytes([fix | n])
    if n < 1 << 16:
        return bytes([b16]) + n.to_bytes(2, "big")
    return bytes([b32]) + n.to_bytes(4, "big")


def pack(obj: Any) -> bytes:
    """msgpack of ``obj`` (bin type for bytes), understanding :class:`Raw` and :class:`Pairs`
    anywhere inside."""
    if isinstance(obj, Raw):
        return bytes(obj)
    if isinstance(obj, Pairs):
        return _header(len(obj), 0x80, 15, 0xDE, 0xDF) + b"".join(
            pack(k) + pack(v) for k, v in obj
        )
    if isinstance(obj, list | tuple):
        return _header(len(obj), 0x90, 15, 0xDC, 0xDD) + b"".join(pack(v) for v in obj)
    if isinstance(obj, dict):
        return pack(Pairs(obj.items()))
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def pack_wide(obj: Any) -> bytes:
    """msgpack of ``obj`` with the widest encoding of every value (uint64/int64 ints, str32,
    bin32, array32, map32): a different but equivalent encoding of the same frame."""
    if isinstance(obj, Raw):
        return bytes(obj)
    if isinstance(obj, bool) or obj is None or isinstance(obj, float):
        return pack(obj)
    if isinstance(obj, int):
        if obj >= 0:
            return b"\xcf" + obj.to_bytes(8, "big")
        return b"\xd3" + obj.to_bytes(8, "big", signed=True)
    if isinstance(obj, str):
        data = obj.encode("utf-8")
        return b"\xdb" + len(data).to_bytes(4, "big") + data
    if isinstance(obj, bytes):
        return b"\xc6" + len(obj).to_bytes(4, "big") + obj
    if isinstance(obj, Pairs | dict):
        items = list(obj.items()) if isinstance(obj, dict) else list(obj)
        return b"\xdf" + len(items).to_bytes(4, "big") + b"".join(
            pack_wide(k) + pack_wide(v) for k, v in items
        )
    if isinstance(obj, list | tuple):
        return b"\xdd" + len(obj).to_bytes(4, "big") + b"".join(pack_wide(v) for v in obj)
    return pack(obj)


def _bin_header_length(n: int) -> int:
    return 2 if n < 1 << 8 else 3 if n < 1 << 16 else 5


def padded(pairs: Pairs, size: int) -> bytes:
    """The frame ``pairs`` plus a ``pad`` field of zero bytes, ``size`` bytes in all (or as
    close above as the encoding allows)."""
    base = len(pack(Pairs([*pairs, ("pad", b"")]))) - 2
    for header in (2, 3, 5):
        n = size - base - header
        if n >= 0 and _bin_header_length(n) == header:
            return pack(Pairs([*pairs, ("pad", bytes(n))]))
    return pack(Pairs([*pairs, ("pad", bytes(max(0, size - base - 5)))]))


class _PairList(list[tuple[Any, Any]]):
    pass


def names_live_round(data: bytes) -> bool:
    """Whether ``data`` decodes (leniently) to a map naming one of the chain's live rounds."""
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, object_pairs_hook=_PairList, max_buffer_size=len(data) + 1
    )
    try:
        unpacker.feed(data)
        obj = unpacker.unpack()
    except Exception:
        return False  # the node cannot decode it either
    if not isinstance(obj, _PairList):
        return False
    return any(
        k == "round" and isinstance(v, int) and not isinstance(v, bool) and 1 <= v < LIVE_MAX
        for k, v in obj
    )


# --------------------------------------------------------------------------- mutations


@dataclass
class Mutated:
    """What goes on the wire: one binary message, a text message, or a fragmented binary
    message; ``close_ok`` is the close code that is the right answer to it, if any."""

    name: str
    data: bytes | str | list[bytes]
    as_text: bool = False
    close_ok: int | None = None

    def wire_bytes(self) -> bytes | None:
        if isinstance(self.data, list):
            return b"".join(self.data)
        if isinstance(self.data, bytes) and not self.as_text:
            return self.data
        return None

    @property
    def size(self) -> int:
        if isinstance(self.data, str):
            return len(self.data.encode("utf-8"))
        if isinstance(self.data, list):
            return sum(len(d) for d in self.data)
        return len(self.data)


#: How each known field is mutated.
FIELD_KINDS = {
    "v": "version",
    "type": "type",
    "round": "round",
    "client": "client",
    "node": "name",
    "sender": "name",
    "chunk": "int",
    "chunks": "int",
    "clients": "int",
    "count": "int",
    "signature": "sig",
    "box": "box",
    "onions": "items",  # a format v1 client's field: the entry mix must refuse it
    "payloads": "items",
}
#: Integers at the edges of msgpack and of the protocol's ranges (none is a live round id).
BOUNDARY_INTS = (
    0,
    -1,
    ROUND_ID_MAX,
    ROUND_ID_MAX + 1,
    (1 << 64) - 1,
    -(1 << 63),
    -(1 << 31),
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 53) + 1,
    ROUND_ID_MAX - 1,
)
SMALL_INTS = (1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 255, 256, 65535, 65536)
FLOATS = (0.0, -0.0, 1.0, 0.5, float("nan"), float("inf"), float("-inf"), 1e308, 2.0**63)
INTERESTING_BYTES = bytes(
    [0x00, 0x01, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5,
     0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCF, 0xD3, 0xD4, 0xD8, 0xD9, 0xDB, 0xDC, 0xDD,
     0xDE, 0xDF, 0xE0, 0xFF]
)


@dataclass(frozen=True)
class Shape:
    """What the fuzzer knows about the node a frame goes to."""

    max_frame: int
    item_length: int
    messages: int
    chunk_items: int
    names: tuple[str, ...]


class Mutator:
    """Seeded mutations of a valid frame (``pairs``, whose first pair is ``v``)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        ops: list[tuple[str, int, Callable[[Pairs, Shape], Mutated]]] = [
            ("unchanged", 4, self.unchanged),
            ("drop-field", 6, self.drop_field),
            ("add-field", 4, self.add_field),
            ("wrong-type", 8, self.wrong_type),
            ("int-boundary", 8, self.int_boundary),
            ("string", 5, self.string),
            ("bytes-length", 5, self.bytes_length),
            ("list", 7, self.list_items),
            ("box", 5, self.box_bytes),
            ("type-field", 4, self.type_field),
            ("version", 4, self.version),
            ("top-level", 3, self.top_level),
            ("non-str-key", 2, self.non_str_key),
            ("duplicate-key", 2, self.duplicate_key),
            ("ext-type", 3, self.ext_type),
            ("deep-nesting", 3, self.deep_nesting),
            ("wide-encoding", 2, self.wide_encoding),
            ("length-lie", 2, self.length_lie),
            ("truncated", 5, self.truncated),
            ("bit-flip", 8, self.bit_flip),
            ("byte-edit", 4, self.byte_edit),
            ("trailing-bytes", 2, self.trailing),
            ("random-bytes", 4, self.random_bytes),
            ("text-frame", 2, self.text_frame),
            ("text-not-utf8", 1, self.text_not_utf8),
            ("fragmented", 2, self.fragmented),
            ("oversized", 5, self.oversized),
        ]
        self.ops = ops

    def mutate(self, pairs: Pairs, shape: Shape) -> Mutated:
        op = self.rng.choices(self.ops, weights=[w for _, w, _ in self.ops])[0]
        return op[2](pairs, shape)

    # ---------------------------------------------------------------- values

    def blob(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def any_value(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(11 if depth < 2 else 7)
        if choice == 0:
            return None
        if choice == 1:
            return r.random() < 0.5
        if choice == 2:
            return r.choice(BOUNDARY_INTS + SMALL_INTS)
        if choice == 3:
            return r.choice(FLOATS)
        if choice == 4:
            return r.choice(["", "x", "round", "\x00", "é" * 40, "x" * 200])
        if choice == 5:
            return self.blob(r.choice([0, 1, 31, 32, 33, 63, 64, 65, 200]))
        if choice == 6:
            return msgpack.ExtType(r.randrange(0, 128), self.blob(r.randrange(0, 9)))
        if choice == 7:
            return [self.any_value(depth + 1) for _ in range(r.randrange(0, 4))]
        if choice == 8:
            return {f"k{i}": self.any_value(depth + 1) for i in range(r.randrange(0, 4))}
        if choice == 9:
            return msgpack.Timestamp(r.randrange(0, 1 << 33), 0)
        return Raw(b"\xa2\xed\xa0")  # a str that is not UTF-8 (half a surrogate)

    def wrong_value_for(self, kind: str) -> Any:
        """A value of another msgpack type than the field's."""
        while True:
            value = self.any_value()
            if kind in ("round", "int", "version") and isinstance(value, int):
                if isinstance(value, bool):
                    return value
                continue
            if kind in ("client", "name", "type") and isinstance(value, str):
                continue
            if kind in ("sig", "box") and isinstance(value, bytes):
                continue
            if kind == "items" and isinstance(value, list):
                continue
            return value

    def strings(self, current: str, max_length: int, shape: Shape) -> list[Any]:
        return [
            "",
            " ",
            current + "x",
            current.upper(),
            current + "\x00",
            "\x00" + current,
            current[:2] + "\x00" + current[2:],
            "\x00" * 3,
            current + "\x01\x1f\x7f",
            "\x85" + current + "\u2028",
            "x" * max_length,
            "x" * (max_length + 1),
            "é" * max_length,
            "😀" * max_length,
            "😀" * (max_length + 1),
            "x" * 10_000,
            "\u202e" + current,
            "\n" + current + "\r\n",
            *shape.names,
            Raw(b"\xa3\xff\xfe\xfd"),  # not UTF-8
        ]

    def pick_field(self, pairs: Pairs, kinds: Iterable[str] | None = None) -> int | None:
        wanted = None if kinds is None else set(kinds)
        indices = [
            i
            for i, (k, _) in enumerate(pairs)
            if wanted is None or FIELD_KINDS.get(k, "any") in wanted
        ]
        return self.rng.choice(indices) if indices else None

    @staticmethod
    def replaced(pairs: Pairs, index: int, value: Any) -> Pairs:
        out = Pairs(pairs)
        out[index] = (out[index][0], value)
        return out

    def encoded(self, name: str, pairs: Pairs | Any) -> Mutated:
        return Mutated(name, pack(pairs))

    # ---------------------------------------------------------------- structural

    def unchanged(self, pairs: Pairs, shape: Shape) -> Mutated:
        return self.encoded("unchanged", pairs)

    def drop_field(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.rng.randrange(len(pairs))
        out = Pairs(pairs)
        key = out.pop(index)[0]
        return self.encoded(f"drop-field:{key}", out)

    def add_field(self, pairs: Pairs, shape: Shape) -> Mutated:
        key = self.rng.choice(
            ["x", "pad", "", "reason", "code", "nonce", "Round", "round ", *FIELD_KINDS]
        )
        out = Pairs(pairs)
        if any(k == key for k, _ in out):
            key = key + "_"
        out.insert(self.rng.randrange(len(out) + 1), (key, self.any_value()))
        return self.encoded("add-field", out)

    def wrong_type(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.rng.randrange(len(pairs))
        key = pairs[index][0]
        value = self.wrong_value_for(FIELD_KINDS.get(key, "any"))
        return self.encoded(f"wrong-type:{key}", self.replaced(pairs, index, value))

    def int_boundary(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.pick_field(pairs, ("round", "int", "version"))
        if index is None:
            return self.add_field(pairs, shape)
        key, current = pairs[index]
        kind = FIELD_KINDS[key]
        options: list[Any] = list(BOUNDARY_INTS)
        if kind == "round":
            options += [current + 1, current - 1]  # the fuzzer's own rounds are far from 0
        else:
            options += SMALL_INTS
            if isinstance(current, int):
                options += [current + 1, current - 1]
        options += [float(current) if isinstance(current, int) else 1.0, str(current), True]
        value = self.rng.choice(options)
        return self.encoded(f"int-boundary:{key}", self.replaced(pairs, index, value))

    def string(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.pick_field(pairs, ("client", "name", "type"))
        if index is None:
            return self.add_field(pairs, shape)
        key, current = pairs[index]
        limit = {"client": MAX_CLIENT_ID_LENGTH, "name": MAX_NAME_LENGTH, "type": 32}
        value = self.rng.choice(self.strings(str(current), limit[FIELD_KINDS[key]], shape))
        return self.encoded(f"string:{key}", self.replaced(pairs, index, value))

    def bytes_length(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.pick_field(pairs, ("sig", "items", "box"))
        if index is None:
            return self.add_field(pairs, shape)
        key, current = pairs[index]
        if FIELD_KINDS[key] == "sig":
            n = self.rng.choice([0, 1, 32, 63, 64, 65, 128, 4096])
            value: Any = self.blob(n)
            return self.encoded(f"bytes-length:{key}:{n}", self.replaced(pairs, index, value))
        if FIELD_KINDS[key] == "box":
            length = shape.item_length
            n = self.rng.choice([0, 1, 31, 32, LAYER_OVERHEAD - 1, LAYER_OVERHEAD,
                                 length - 1, length + 1, length + LAYER_OVERHEAD, 2 * length])
            value = self.blob(max(0, n))
            return self.encoded(f"bytes-length:{key}:{n}", self.replaced(pairs, index, value))
        items = list(current)
        if not items:
            items = [self.blob(shape.item_length)]
        i = self.rng.randrange(len(items))
        n = self.rng.choice(
            [0, 1, shape.item_length - 1, shape.item_length + 1, 2 * shape.item_length]
        )
        items[i] = self.blob(max(0, n))
        return self.encoded(f"bytes-length:{key}:{n}", self.replaced(pairs, index, items))

    def list_items(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.pick_field(pairs, ("items",))
        if index is None:
            return self.wrong_type(pairs, shape)
        key, current = pairs[index]
        items: list[Any] = list(current)
        length = shape.item_length
        how = self.rng.choice(
            [
                "empty",
                "drop-one",
                "add-one",
                "replay",
                "one-too-many",
                "many",
                "item-type",
                "item-flip",
                "joined",
                "as-map",
                "nested",
                "shuffled",
            ]
        )
        value: Any
        if how == "empty":
            value = []
        elif how == "drop-one":
            value = items[:-1]
        elif how == "add-one":
            value = [*items, self.blob(length)]
        elif how == "replay":
            value = [*items, items[0]] if items else [self.blob(length)] * 2
        elif how == "one-too-many":
            value = [self.blob(length) for _ in range(max(shape.chunk_items, shape.messages) + 1)]
        elif how == "many":
            value = [b"x"] * self.rng.choice([1000, 20_000])
        elif how == "item-type":
            value = items or [b""]
            value[self.rng.randrange(len(value))] = self.wrong_value_for("sig")
        elif how == "item-flip":
            value = items or [self.blob(length)]
            i = self.rng.randrange(len(value))
            flipped = bytearray(value[i])
            if flipped:
                flipped[self.rng.randrange(len(flipped))] ^= 1 << self.rng.randrange(8)
            value[i] = bytes(flipped)
        elif how == "joined":
            value = b"".join(items)
        elif how == "as-map":
            value = {str(i): item for i, item in enumerate(items)}
        elif how == "nested":
            value = [items]
        else:
            value = items[::-1]
        return self.encoded(f"list:{key}:{how}", self.replaced(pairs, index, value))

    def box_bytes(self, pairs: Pairs, shape: Shape) -> Mutated:
        """A submission box (one entry layer around ``m`` inner onions) changed inside its
        right length, cut, grown, or sent as format v1's list of ``m`` onions."""
        index = self.pick_field(pairs, ("box",))
        if index is None:
            return self.bytes_length(pairs, shape)
        key, current = pairs[index]
        box = bytes(current) if isinstance(current, bytes) else self.blob(shape.item_length)
        how = self.rng.choice(
            ["flip-key", "flip-body", "flip-tag", "zero-key", "random", "truncate", "extend",
             "as-list", "as-onions", "empty"]
        )  # fmt: skip
        value: Any
        if how.startswith("flip-") and box:
            flipped = bytearray(box)
            if how == "flip-key":  # the ephemeral key
                i = self.rng.randrange(min(32, len(box)))
            elif how == "flip-tag":  # the Poly1305 tag at the end
                i = len(box) - 1 - self.rng.randrange(min(16, len(box)))
            else:
                i = self.rng.randrange(len(box))
            flipped[i] ^= 1 << self.rng.randrange(8)
            value = bytes(flipped)
        elif how == "zero-key":  # a low-order ephemeral key: no shared secret
            value = bytes(32) + box[32:]
        elif how == "random":
            value = self.blob(len(box))
        elif how == "truncate":
            value = box[: self.rng.randrange(len(box) + 1)]
        elif how == "extend":
            value = box + self.blob(self.rng.choice([1, 16, LAYER_OVERHEAD]))
        elif how == "as-list":
            value = [box]
        elif how == "as-onions":  # format v1: m separate onions instead of one box
            width = max(1, (len(box) - LAYER_OVERHEAD) // max(1, shape.messages))
            value = [self.blob(width + LAYER_OVERHEAD) for _ in range(shape.messages)]
        else:
            value = b""
        return self.encoded(f"box:{key}:{how}", self.replaced(pairs, index, value))

    def type_field(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.pick_field(pairs, ("type",))
        assert index is not None
        value = self.rng.choice(
            [
                *FRAME_TYPES[:-1],
                *UNKNOWN_TYPES,
                "x" * 33,
                None,
                1,
                b"status",
                ["status"],
                {"type": "status"},
            ]
        )
        return self.encoded("type-field", self.replaced(pairs, index, value))

    def version(self, pairs: Pairs, shape: Shape) -> Mutated:
        v = WIRE_VERSION
        value = self.rng.choice(
            [0, v - 1, v + 1, -1, 255, (1 << 64) - 1, -(1 << 63), str(v), float(v), True, None,
             bytes([v]), [v], Raw(b"\xcf" + v.to_bytes(8, "big")), Raw(b"\xd0" + bytes([v]))]
        )
        out = Pairs(pairs)
        if self.rng.random() < 0.15:
            out = Pairs([p for p in out if p[0] != "v"])
            return self.encoded("version:missing", out)
        out = Pairs([(k, value if k == "v" else v) for k, v in out])
        return self.encoded("version", out)

    def top_level(self, pairs: Pairs, shape: Shape) -> Mutated:
        value = self.rng.choice(
            [
                [v for _, v in pairs],
                [dict(pairs)],
                [dict(pairs), dict(pairs)],
                1,
                -1,
                "submit",
                b"\x00" * 8,
                None,
                True,
                1.5,
                msgpack.ExtType(1, b"x"),
                {"v": WIRE_VERSION, "type": "status", "frame": dict(pairs)},
                [],
                {},
            ]
        )
        return Mutated("top-level", pack(value))

    def non_str_key(self, pairs: Pairs, shape: Shape) -> Mutated:
        key = self.rng.choice([1, -1, b"type", None, True, 1.5, Raw(b"\x91\x01"), Raw(b"\x80")])
        out = Pairs(pairs)
        out.insert(self.rng.randrange(len(out) + 1), (key, self.any_value()))
        if self.rng.random() < 0.3:  # inside a nested map instead
            out = Pairs([*pairs, ("x", Pairs([(key, 1)]))])
        return self.encoded("non-str-key", out)

    def duplicate_key(self, pairs: Pairs, shape: Shape) -> Mutated:
        index = self.rng.randrange(len(pairs))
        key, value = pairs[index]
        other = value if self.rng.random() < 0.5 else self.any_value()
        out = Pairs(pairs)
        out.insert(self.rng.randrange(len(out) + 1), (key, other))
        return self.encoded(f"duplicate-key:{key}", out)

    def ext_type(self, pairs: Pairs, shape: Shape) -> Mutated:
        r = self.rng
        ext: Any = r.choice(
            [
                msgpack.ExtType(r.randrange(0, 128), self.blob(r.randrange(0, 20))),
                Raw(b"\xd4" + r.randrange(128, 256).to_bytes(1, "big") + self.blob(1)),
                Raw(b"\xd6\xff" + self.blob(4)),  # a timestamp (ext -1)
                Raw(b"\xd7\xff" + self.blob(8)),
                Raw(b"\xc7\x0c\xff" + self.blob(12)),
                Raw(b"\xc7\x05\xff" + self.blob(5)),  # a broken timestamp
                msgpack.Timestamp(0, 0),
                Raw(b"\xc9\xff\xff\xff\xff\x01"),  # ext32 claiming 4 GiB
            ]
        )
        index = r.randrange(len(pairs))
        if r.random() < 0.2:
            return Mutated("ext-type:top", pack(ext))
        return self.encoded(f"ext-type:{pairs[index][0]}", self.replaced(pairs, index, ext))

    def deep_nesting(self, pairs: Pairs, shape: Shape) -> Mutated:
        depth = self.rng.choice([100, 1000, 1023, 1024, 1025, 5000, 50_000, shape.max_frame // 2])
        if self.rng.random() < 0.5:
            nested = Raw(b"\x91" * depth + b"\xc0")
        else:
            nested = Raw(b"\x81\xa1k" * (depth // 3 + 1) + b"\xc0")
        index = self.rng.randrange(len(pairs))
        if self.rng.random() < 0.2:
            return Mutated(f"deep-nesting:top:{depth}", bytes(nested))
        out = self.replaced(pairs, index, nested)
        return self.encoded(f"deep-nesting:{pairs[index][0]}:{depth}", out)

    def wide_encoding(self, pairs: Pairs, shape: Shape) -> Mutated:
        return Mutated("wide-encoding", pack_wide(pairs))

    def length_lie(self, pairs: Pairs, shape: Shape) -> Mutated:
        body = b"".join(pack(k) + pack(v) for k, v in pairs)
        n = len(pairs)
        how = self.rng.choice(["map+1", "map32-huge", "str32-huge", "bin32-huge", "array32-huge"])
        if how == "map+1":
            data = _header(n + 1, 0x80, 15, 0xDE, 0xDF) + body
        elif how == "map32-huge":
            data = b"\xdf\xff\xff\xff\xff" + body
        elif how == "str32-huge":
            data = _header(n + 1, 0x80, 15, 0xDE, 0xDF) + body + pack("x") + b"\xdb\x7f\xff\xff\xff"
        elif how == "bin32-huge":
            data = _header(n + 1, 0x80, 15, 0xDE, 0xDF) + body + pack("x") + b"\xc6\xff\xff\xff\xf0"
        else:
            data = _header(n + 1, 0x80, 15, 0xDE, 0xDF) + body + pack("x") + b"\xdd\xff\xff\xff\xff"
        return Mutated(f"length-lie:{how}", data)

    # ---------------------------------------------------------------- bytes

    def truncated(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = pack(pairs)
        cut = self.rng.randrange(len(data))
        return Mutated("truncated" if cut else "empty", data[:cut])

    def bit_flip(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = bytearray(pack(pairs))
        flips = self.rng.choice([1, 1, 2, 4, 8])
        for _ in range(flips):
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        return Mutated(f"bit-flip:{flips}", bytes(data))

    def byte_edit(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = bytearray(pack(pairs))
        for _ in range(self.rng.randrange(1, 5)):
            at = self.rng.randrange(len(data) + 1)
            b = self.rng.choice(INTERESTING_BYTES)
            how = self.rng.randrange(3)
            if how == 0 and at < len(data):
                data[at] = b
            elif how == 1:
                data.insert(at, b)
            elif at < len(data) and len(data) > 1:
                del data[at]
        return Mutated("byte-edit", bytes(data))

    def trailing(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = pack(pairs)
        extra = data if self.rng.random() < 0.3 else self.blob(self.rng.randrange(1, 17))
        return Mutated("trailing-bytes", data + extra)

    def random_bytes(self, pairs: Pairs, shape: Shape) -> Mutated:
        n = self.rng.choice([1, 2, 3, 8, 64, 1000, 4096, shape.max_frame])
        data = self.blob(n)
        if self.rng.random() < 0.3:  # start like a map, so the parser goes further
            data = bytes([0x80 | self.rng.randrange(16)]) + data[1:]
        return Mutated(f"random-bytes:{n}", data)

    # ---------------------------------------------------------------- transport

    def text_frame(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = pack(pairs)
        text = self.rng.choice(
            [
                data.decode("latin-1"),
                json.dumps({k: v for k, v in pairs if isinstance(v, str | int)}),
                "",
                "hello",
            ]
        )
        return Mutated("text-frame", text)

    def text_not_utf8(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = pack(pairs) + b"\xff\xfe"
        return Mutated("text-not-utf8", data, as_text=True, close_ok=INVALID_DATA)

    def fragmented(self, pairs: Pairs, shape: Shape) -> Mutated:
        data = pack(pairs)
        pieces = min(len(data) - 1, self.rng.randrange(1, 5))
        cuts = sorted(self.rng.sample(range(1, len(data)), pieces))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        return Mutated(f"fragmented:{len(parts)}", parts)

    def oversized(self, pairs: Pairs, shape: Shape) -> Mutated:
        limit = shape.max_frame
        how = self.rng.choice(["at-limit", "limit+1", "between", "twice", "twice+1", "thrice"])
        size = {
            "at-limit": limit,
            "limit+1": limit + 1,
            "between": self.rng.randrange(limit + 1, 2 * limit + 1),
            "twice": 2 * limit,
            "twice+1": 2 * limit + 1,
            "thrice": 3 * limit,
        }[how]
        data = padded(pairs, size)
        return Mutated(
            f"oversized:{how}", data, close_ok=MESSAGE_TOO_BIG if len(data) > 2 * limit else None
        )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Cell:
    node: str
    frame: str
    auth: bool = False

    @property
    def label(self) -> str:
        return f"{self.frame}+auth" if self.auth else self.frame


def all_cells() -> list[Cell]:
    cells: list[Cell] = []
    for node in NODE_KINDS:
        for frame in FRAME_TYPES:
            cells.append(Cell(node, frame))
            if node != "entry" and frame in PREDECESSOR_ONLY:
                cells.append(Cell(node, frame, auth=True))
    return cells


@dataclass
class CellStats:
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    replies: Counter[str] = field(default_factory=Counter)
    logged_errors: int = 0


class LogCapture(logging.Handler):
    """Keeps every WARNING-or-worse record of the nodes, tagged with the frame being sent."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, logging.LogRecord]] = []
        self.frame = -1
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((self.frame, record))


@dataclass
class Options:
    frames: int = 5000
    seed: int = 1
    timeout: float = 5.0
    relays: int = 2
    honest: int = 6
    health_every: int = 25
    json_path: Path | None = None
    quiet: bool = False


# --------------------------------------------------------------------------- the fuzzer


def seal_from(
    payload: bytes, keys: Sequence[bytes], *, first_hop: int, round_id: int
) -> bytes:
    """An onion for the mixes from hop ``first_hop`` on (their round keys in chain order; no
    keys: the payload itself)."""
    return wrap(payload, keys, chain_id=CHAIN_ID, round_id=round_id, first_hop=first_hop)


class SetupFailed(Exception):
    """A valid exchange that prepares a frame did not get its valid answer."""


class Fuzzer:
    def __init__(self, chain: FuzzChain, options: Options, capture: LogCapture) -> None:
        self.chain = chain
        self.options = options
        self.capture = capture
        #: the order of the cells; every frame then draws from its own generator, seeded with
        #: (seed, frame index), so that a frame's mutation does not depend on what the nodes
        #: answered to earlier frames
        self.schedule = random.Random(options.seed)
        self.rng = random.Random(f"{options.seed}:-1")
        self.mutator = Mutator(self.rng)
        self.targets = targets_of(chain)
        self.client = MixnetClient(
            chain.config, messages=MESSAGES, payload_length=WIDTH, sink_url=chain.config.sink.url
        )
        self.stats: dict[Cell, CellStats] = {c: CellStats() for c in all_cells()}
        self.mutations: dict[str, Counter[str]] = {}
        self.findings: list[dict[str, object]] = []
        self.next_round = FUZZ_ROUND_BASE
        #: the fuzzer's rounds each node has seen, and their round keys by hop
        self.known: dict[str, list[int]] = {t.name: [] for t in self.every_target()}
        self.round_keys: dict[int, dict[int, bytes]] = {}
        #: the entry mix's submissions the fuzzer built (for retries and replays)
        self.submits: list[dict[str, Any]] = []
        #: (round, client) of every submission the entry mix acknowledged to the fuzzer
        self.accepted: set[tuple[int, str]] = set()
        self.clients = 0
        self.crashed = False

    def every_target(self) -> list[Target]:
        return [t for ts in self.targets.values() for t in ts]

    # ---------------------------------------------------------------- exchanges

    async def exchange(
        self, ws: ClientConnection, frame: Mapping[str, object]
    ) -> dict[str, object]:
        await ws.send(encode_frame(frame))
        raw = await asyncio.wait_for(ws.recv(), self.options.timeout)
        if not isinstance(raw, bytes):
            raise SetupFailed(f"text reply to {frame.get('type')!r}")
        return decode_frame(raw, max_size=MAX_REPLY)

    async def expect(
        self, ws: ClientConnection, frame: Mapping[str, object], kind: str
    ) -> dict[str, object]:
        reply = await self.exchange(ws, frame)
        if reply.get("type") != kind:
            raise SetupFailed(f"{frame.get('type')!r} got {_brief(reply)}, expected {kind!r}")
        return reply

    async def authenticate(self, ws: ClientConnection, target: Target) -> None:
        assert target.predecessor is not None and target.predecessor_key is not None
        nonce = (await self.expect(ws, {"type": "challenge"}, "challenge"))["nonce"]
        assert isinstance(nonce, bytes)
        signature = sign_link_challenge(
            target.predecessor_key, chain_id=CHAIN_ID, node=target.predecessor, challenge=nonce
        )
        await self.expect(
            ws,
            {"type": "authenticate", "node": target.predecessor, "signature": signature},
            "authenticated",
        )

    def fresh_round(self) -> int:
        self.next_round += 1
        return self.next_round

    async def open_fuzz_round(self, ws: ClientConnection, target: Target) -> int:
        """Open a fresh round of the fuzzer's at ``target`` (and the nodes after it) over an
        authenticated connection."""
        r = self.fresh_round()
        reply = await self.expect(ws, {"type": "open-round", "round": r}, "round-keys")
        self.note_round_keys(target, reply)
        return r

    def note_round_keys(self, target: Target, reply: Mapping[str, object]) -> None:
        """Remember the round keys of a ``round-keys`` reply of ``target`` (its own and every
        later mix's, in chain order) and that the round is known from ``target`` on."""
        r, announcements = reply.get("round"), reply.get("announcements")
        if not isinstance(r, int) or not isinstance(announcements, list):
            return
        keys = self.round_keys.setdefault(r, {})
        for hop, a in enumerate(announcements, start=target.hop):
            if isinstance(a, Mapping) and isinstance(a.get("public_key"), bytes):
                keys[hop] = a["public_key"]
        self.note_known(target, r)

    def note_known(self, target: Target, round_id: int) -> None:
        for t in self.chain_after(target):
            if round_id not in self.known[t.name]:
                self.known[t.name].append(round_id)

    def chain_after(self, target: Target) -> list[Target]:
        return [t for t in self.every_target() if t.hop >= target.hop]

    def some_round(self, target: Target, p_known: float) -> int:
        """One of the fuzzer's rounds ``target`` has seen (open, aborted, mixed, done ...)
        with probability ``p_known``, else a fresh one."""
        known = self.known[target.name]
        if known and self.rng.random() < p_known:
            return self.rng.choice(known[-200:])
        return self.fresh_round()

    # ---------------------------------------------------------------- valid frames

    async def base_frame(self, ws: ClientConnection, target: Target, cell: Cell) -> dict[str, Any]:
        """A valid frame of ``cell.frame`` for ``target`` (valid as the protocol goes: a frame
        the node does not take is still well formed), preparing the connection for it.

        Frames of the authenticated predecessor name fresh rounds or rounds of the fuzzer's
        that the node already saw in some state, so that the round machine's answers for
        every status are reached (idempotent re-opens, ``round-closed``, re-sent chunks ...).
        """
        rng = self.rng
        if cell.auth:
            await self.authenticate(ws, target)
        kind = cell.frame
        if kind in ("get-round", "status", "challenge"):
            return {"type": kind}
        if kind == "unknown":
            frame: dict[str, Any] = {"type": rng.choice(UNKNOWN_TYPES)}
            if rng.random() < 0.5:
                frame["round"] = self.fresh_round()
            return frame
        if kind == "authenticate":
            reply = await self.expect(ws, {"type": "challenge"}, "challenge")
            nonce = reply["nonce"]
            assert isinstance(nonce, bytes)
            node = target.predecessor or self.chain.mixes[0].settings.name
            signer = target.predecessor_key or self.chain.identities[node]
            signature = sign_link_challenge(signer, chain_id=CHAIN_ID, node=node, challenge=nonce)
            return {"type": "authenticate", "node": node, "signature": signature}
        if kind == "submit":
            return await self.submit_frame(ws, target)
        if kind == "submit-many":
            return await self.submit_many_frame(ws, target)
        if kind == "open-round":
            r = self.some_round(target, 0.35 if cell.auth else 0.0)
            if cell.auth:
                self.note_known(target, r)
            return {"type": "open-round", "round": r}
        if kind == "abort-round":
            r = self.some_round(target, 0.7)
            if cell.auth:
                self.note_known(target, r)
            return {"type": "abort-round", "round": r}
        if kind == "batch":
            return await self.batch_frame(ws, target, cell)
        if kind == "trace":
            return {"type": "trace", "round": self.some_round(target, 0.5)}
        if kind == "exclude":
            items = [self.mutator.blob(target.item_length) for _ in range(rng.randrange(3))]
            abort = rng.choice(["", "fuzz"])
            return {"type": "exclude", "round": self.some_round(target, 0.5), "items": items,
                    "excluded": rng.randrange(3), "abort": abort}
        if kind == "subscribe":
            results = list(self.chain.sink.machine.results)
            choice = rng.random()
            if results and choice < 0.5:
                r = rng.choice(results)
            elif choice < 0.8:
                r = self.fresh_round()
            else:
                offer = self.chain.mixes[0].machine
                r = max([1, *(k for k in offer.rounds if k < LIVE_MAX)])
            return {"type": "subscribe", "round": r}
        raise AssertionError(kind)

    async def submit_frame(self, ws: ClientConnection, target: Target) -> dict[str, Any]:
        """A submission of all-zero payloads to the entry mix's open round: fresh (mostly),
        an exact retry of an earlier one, an earlier client id with a fresh box, an earlier
        box under a new client id, or a box bound to another round."""
        rng = self.rng
        self.clients += 1
        client = f"fuzz-{self.options.seed}-{self.clients}"
        if target.kind != "entry":  # well formed, but this node takes no submissions
            box = self.mutator.blob(target.item_length)
            return {"type": "submit", "round": 1, "client": client, "box": box}
        reply = await self.expect(ws, {"type": "get-round"}, "round")
        info = self.client.verify_round(reply)
        payloads = [bytes(WIDTH)] * MESSAGES  # zeros: the honest sums stay exact
        how = rng.choices(["fresh", "retry", "same-client", "same-box", "other-binding"],
                          weights=[6, 1, 1, 1, 1])[0]
        earlier = rng.choice(self.submits) if self.submits else None
        if how == "retry" and earlier is not None:
            return dict(earlier)
        if how == "same-box" and earlier is not None:
            return {**earlier, "round": info.round_id, "client": client}
        if how == "same-client" and earlier is not None:
            client = earlier["client"]
        if how == "other-binding":  # the right keys, bound to the next round
            keys = info.public_keys
            box = await asyncio.to_thread(
                lambda: wrap_submission(
                    payloads, keys, chain_id=CHAIN_ID, round_id=info.round_id + 1
                )
            )
        else:
            box = await asyncio.to_thread(self.client.wrap, payloads, info)
        frame = {"type": "submit", "round": info.round_id, "client": client, "box": box}
        self.submits = [*self.submits[-30:], frame]
        return frame

    async def submit_many_frame(self, ws: ClientConnection, target: Target) -> dict[str, Any]:
        """A ``submit-many`` of one to four of :meth:`submit_frame`'s submissions (each
        without its ``type``), or now and then an empty list."""
        rng = self.rng
        elements = []
        for _ in range(0 if rng.random() < 0.05 else rng.randint(1, 4)):
            element = dict(await self.submit_frame(ws, target))
            del element["type"]
            elements.append(element)
        return {"type": "submit-many", "submissions": elements}

    async def batch_frame(self, ws: ClientConnection, target: Target, cell: Cell) -> dict[str, Any]:
        """A chunk of a batch: for the authenticated predecessor, of a round opened for it
        (items are onions for the mixes from ``target`` on, payloads at the sink) or of a
        round the node already saw; otherwise of a fresh round."""
        rng = self.rng
        chunk_items = target.node.settings.policy.chunk_size
        sender = target.predecessor or "mix0"
        if not cell.auth or target.kind == "entry":
            r = self.fresh_round()
            n = rng.randrange(chunk_items + 1)
            items = [self.mutator.blob(target.item_length) for _ in range(n)]
            return {
                "type": "batch", "round": r, "sender": sender, "chunk": 0, "chunks": 1,
                "clients": len(items) // MESSAGES, "count": len(items), "payloads": items,
            }
        if self.known[target.name] and rng.random() < 0.3:
            r = rng.choice(self.known[target.name][-200:])
        else:
            r = await self.open_fuzz_round(ws, target)
        chunks = rng.choice([1, 1, 1, 2, 3])
        clients = rng.randrange(0, chunks * chunk_items // MESSAGES + 1)
        count = clients * MESSAGES
        index = rng.randrange(chunks)
        size = min(chunk_items, count)
        payloads = [rng.randrange(1 << 16).to_bytes(WIDTH, "big") for _ in range(size)]
        hops = range(target.hop, self.chain.mixes[0].settings.hops)
        known_keys = self.round_keys.get(r, {})
        if all(h in known_keys for h in hops):
            keys = [known_keys[h] for h in hops]
            items = await asyncio.to_thread(
                lambda: [seal_from(p, keys, first_hop=target.hop, round_id=r) for p in payloads]
            )
        else:
            items = [self.mutator.blob(target.item_length) for _ in payloads]
        return {
            "type": "batch", "round": r, "sender": sender, "chunk": index, "chunks": chunks,
            "clients": clients, "count": count, "payloads": items,
        }

    # ---------------------------------------------------------------- one frame

    def pick_target(self, cell: Cell) -> Target:
        return self.rng.choice(self.targets[cell.node])

    def shape(self, target: Target) -> Shape:
        names = tuple(t.name for ts in self.targets.values() for t in ts)
        return Shape(
            max_frame=target.max_frame,
            item_length=target.item_length,
            messages=MESSAGES,
            chunk_items=target.node.settings.policy.chunk_size,
            names=names,
        )

    async def fuzz_one(self, index: int, cell: Cell) -> None:
        self.rng = self.mutator.rng = random.Random(f"{self.options.seed}:{index}")
        target = self.pick_target(cell)
        self.capture.frame = index
        mark = len(self.capture.records)
        outcome, detail, mutated, reply = await self.attempt(target, cell)
        problem = await self.health(target)
        if problem is None and index % self.options.health_every == 0:
            for t in (t for ts in self.targets.values() for t in ts):
                problem = await self.health(t)
                if problem is not None:
                    break
        if problem is not None:
            outcome, detail = "crash", f"{detail}; health check: {problem}".strip("; ")
            self.crashed = True
        stats = self.stats[cell]
        stats.sent += 1
        stats.outcomes[outcome] += 1
        if reply is not None:
            if reply.get("type") == "error":
                stats.codes[str(reply.get("code"))] += 1
            else:
                stats.replies[str(reply.get("type"))] += 1
        name = mutated.name if mutated is not None else "-"
        self.mutations.setdefault(name.split(":")[0], Counter())[outcome] += 1
        logged = [rec for _, rec in self.capture.records[mark:] if rec.levelno >= logging.ERROR]
        stats.logged_errors += len(logged)
        if outcome in FAILURES or logged:
            self.findings.append(
                {
                    "frame": index,
                    "node": target.name,
                    "kind": cell.node,
                    "frame_type": cell.label,
                    "mutation": name,
                    "outcome": outcome,
                    "detail": detail,
                    "reply": None if reply is None else _brief(reply),
                    "fields": None if mutated is None else _fields(mutated),
                    "bytes": None if mutated is None else _hex(mutated),
                    "size": None if mutated is None else mutated.size,
                    "log": [self.capture.format(r) for _, r in self.capture.records[mark:]][-20:],
                }
            )

    async def attempt(
        self, target: Target, cell: Cell
    ) -> tuple[str, str, Mutated | None, dict[str, object] | None]:
        timeout = self.options.timeout
        try:
            ws = await connect(
                target.url, max_size=None, compression=None, open_timeout=timeout,
                ping_interval=None, close_timeout=1, proxy=None,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            return "crash", f"cannot connect: {type(exc).__name__}: {exc}", None, None
        mutated: Mutated | None = None
        try:
            try:
                base = await asyncio.wait_for(self.base_frame(ws, target, cell), 3 * timeout)
            except TimeoutError:
                return "hang", "no answer to a set-up exchange", None, None
            except ConnectionClosed as exc:
                return "unexpected-close", f"during set-up: {_close(exc)}", None, None
            except (SetupFailed, MixnetError, AssertionError, KeyError, TypeError) as exc:
                return "setup-failed", f"{type(exc).__name__}: {exc}", None, None
            pairs = Pairs([("v", WIRE_VERSION), *base.items()])
            shape = self.shape(target)
            for _ in range(50):
                mutated = self.mutator.mutate(pairs, shape)
                data = mutated.wire_bytes()
                if not (cell.auth and data is not None and names_live_round(data)):
                    break
            else:
                mutated = Mutated("unchanged", pack(pairs))
            outcome = await self.send(ws, target, mutated)
            if outcome[0] in ("typed-error", "accepted"):
                after = await self.still_serving(ws)
                if after is not None:
                    return (after[0], after[1], mutated, outcome[3])
            return outcome
        finally:
            if ws.state.name == "OPEN":
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 2)
            ws.transport.abort()

    async def send(
        self, ws: ClientConnection, target: Target, mutated: Mutated
    ) -> tuple[str, str, Mutated | None, dict[str, object] | None]:
        try:
            if isinstance(mutated.data, list):
                await ws.send(mutated.data)
            elif mutated.as_text:
                await ws.send(mutated.data, text=True)
            else:
                await ws.send(mutated.data)
            raw = await asyncio.wait_for(ws.recv(), self.options.timeout)
        except TimeoutError:
            return "hang", f"no reply within {self.options.timeout} s", mutated, None
        except ConnectionClosed as exc:
            code = None if exc.rcvd is None else exc.rcvd.code
            if mutated.close_ok is not None and code == mutated.close_ok:
                return "closed", _close(exc), mutated, None
            return "unexpected-close", _close(exc), mutated, None
        if not isinstance(raw, bytes):
            return "untyped-error", f"text reply {raw[:80]!r}", mutated, None
        try:
            reply = decode_frame(raw, max_size=MAX_REPLY)
        except MixnetError as exc:
            return "untyped-error", f"undecodable reply: {exc}", mutated, None
        if reply.get("type") == "error":
            error_code = reply.get("code")
            if (
                isinstance(error_code, str)
                and error_code in ERRORS_BY_CODE
                and error_code != InternalError.code
            ):
                return "typed-error", error_code, mutated, reply
            detail = f"error code {error_code!r}: {reply.get('reason')!r}"
            return "untyped-error", detail, mutated, reply
        if reply.get("type") == "receipts":
            results = reply.get("results")
            if not isinstance(results, list):
                return "untyped-error", f"receipts without results: {_brief(reply)}", mutated, reply
            for result in results:
                if not isinstance(result, dict):
                    return "untyped-error", f"a receipt is {result!r}", mutated, reply
                error_code = result.get("code")
                if result.get("type") == "error" and (
                    not isinstance(error_code, str)
                    or error_code not in ERRORS_BY_CODE
                    or error_code == InternalError.code
                ):
                    detail = f"receipt error code {error_code!r}: {result.get('reason')!r}"
                    return "untyped-error", detail, mutated, reply
                self.note_accepted(result)
        self.note_accepted(reply)
        if reply.get("type") == "round-keys" and target.kind != "entry":
            self.note_round_keys(target, reply)
        return "accepted", str(reply.get("type")), mutated, reply

    def note_accepted(self, reply: dict[str, Any]) -> None:
        """Remember the (round, client) of an ``accepted`` reply or receipt."""
        if reply.get("type") == "accepted":
            r, c = reply.get("round"), reply.get("client")
            if isinstance(r, int) and isinstance(c, str):
                self.accepted.add((r, c))

    async def still_serving(self, ws: ClientConnection) -> tuple[str, str] | None:
        """``None`` if the connection that carried the frame answers a ``status`` too (every
        rejection leaves the connection serving); else the outcome and what happened."""
        try:
            reply = await self.exchange(ws, {"type": "status"})
        except TimeoutError:
            return "hang", "the connection stopped answering after the reply"
        except ConnectionClosed as exc:
            return "unexpected-close", f"after the reply: {_close(exc)}"
        except (SetupFailed, MixnetError) as exc:
            return "untyped-error", f"status after the reply: {exc}"
        if reply.get("type") != "status":
            return "untyped-error", f"status after the reply got {_brief(reply)}"
        return None

    async def health(self, target: Target) -> str | None:
        """``None`` if ``target`` answers ``status`` on a fresh connection and
        ``GET /healthz``; else what failed."""
        timeout = self.options.timeout
        try:
            async with connect(
                target.url, compression=None, open_timeout=timeout, ping_interval=None,
                close_timeout=1, proxy=None,
            ) as ws:
                reply = await self.exchange(ws, {"type": "status"})
                if reply.get("type") != "status" or reply.get("node") != target.name:
                    return f"status answered {_brief(reply)}"
        except Exception as exc:
            return f"status: {type(exc).__name__}: {exc}"
        try:
            status = await asyncio.wait_for(_http_get(target.port, "/healthz"), timeout)
        except Exception as exc:
            return f"/healthz: {type(exc).__name__}: {exc}"
        if status != 200:
            return f"/healthz answered {status}"
        return None

    # ---------------------------------------------------------------- campaign

    async def campaign(self) -> None:
        cells = all_cells()
        order: list[Cell] = []
        for i in range(self.options.frames):
            if i % len(cells) == 0:
                order = list(cells)
                self.schedule.shuffle(order)
            await self.fuzz_one(i, order[i % len(cells)])
            if self.crashed:
                break
            if not self.options.quiet and (i + 1) % 500 == 0:
                print(f"  {i + 1} frames", file=sys.stderr, flush=True)
        self.capture.frame = -1

    # ---------------------------------------------------------------- afterwards

    async def honest_round(self) -> dict[str, object]:
        """Honest submissions through MixnetClient; every round they (or the fuzzer's
        accepted zero-valued submissions) went into must end ok with the exact sum and the
        exact number of clients."""
        values = {
            f"honest-{i}": [1000 * (i + 1) + j for j in range(MESSAGES)]
            for i in range(self.options.honest)
        }
        config = self.chain.config
        async with MixnetClient(
            config, messages=MESSAGES, payload_length=WIDTH, sink_url=config.sink.url,
            retry_for=30,
        ) as client:
            receipts = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        client.submit(_payloads_of(v), client_id=name)
                        for name, v in values.items()
                    )
                ),
                60,
            )
            honest_rounds: dict[int, list[str]] = {}
            for receipt in receipts:
                honest_rounds.setdefault(receipt.round_id, []).append(receipt.client_id)
            fuzz_rounds: dict[int, int] = Counter(r for r, _ in self.accepted)
            rounds = sorted(set(honest_rounds) | set(fuzz_rounds))
            problems: list[str] = []
            results: dict[int, dict[str, object]] = {}
            for r in rounds:
                try:
                    results[r] = await asyncio.wait_for(_result(client, r), 60)
                except TimeoutError:
                    problems.append(f"round {r}: no result within 60 s")
        for r in rounds:
            if r not in results:
                continue
            res = results[r]
            names = honest_rounds.get(r, [])
            want_sum = sum(sum(values[n]) for n in names)
            want_clients = len(names) + fuzz_rounds.get(r, 0)
            if (res.get("status"), res.get("sum"), res.get("clients")) != (
                "ok", want_sum, want_clients
            ):
                problems.append(
                    f"round {r}: got {res}, expected status ok, sum {want_sum}, "
                    f"clients {want_clients}"
                )
        return {
            "ok": not problems,
            "honest_clients": len(values),
            "honest_rounds": {str(r): len(v) for r, v in sorted(honest_rounds.items())},
            "fuzz_accepted_by_round": {str(r): n for r, n in sorted(fuzz_rounds.items())},
            "results": {str(r): results[r] for r in sorted(results)},
            "problems": problems,
        }


def _payloads_of(values: Sequence[int]) -> Callable[[], list[bytes]]:
    return lambda: [v.to_bytes(WIDTH, "big") for v in values]


async def _result(client: MixnetClient, round_id: int) -> dict[str, object]:
    while True:
        reply = await client.sink_request({"type": "subscribe", "round": round_id})
        if reply.get("type") == "result":
            reply.pop("v", None)
            reply.pop("type", None)
            return reply


async def _http_get(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await reader.readline()
        return int(line.split()[1])
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _close(exc: ConnectionClosed) -> str:
    rcvd = exc.rcvd
    return "closed without a close frame" if rcvd is None else f"close {rcvd.code} {rcvd.reason!r}"


def _brief(reply: Mapping[str, object]) -> str:
    shown = {
        k: f"<{type(v).__name__}>" if isinstance(v, bytes | list) else v for k, v in reply.items()
    }
    return repr(shown)[:300]


def _fields(mutated: Mutated) -> dict[str, str] | None:
    """The top-level fields of the frame as sent (decoded leniently; values as short
    reprs), or ``None`` if it is not a map."""
    data = mutated.wire_bytes()
    if data is None:
        return None
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, object_pairs_hook=_PairList, max_buffer_size=len(data) + 1
    )
    try:
        unpacker.feed(data)
        obj = unpacker.unpack()
    except Exception:
        return None
    if not isinstance(obj, _PairList):
        return None
    return {str(k): _short(v) for k, v in obj}


def _short(value: object) -> str:
    if isinstance(value, list):
        shown = ", ".join(_short(v) for v in value[:2]) + (", ..." if len(value) > 2 else "")
        return f"[{len(value)} items: {shown}]"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _hex(mutated: Mutated) -> str:
    data = mutated.data
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else (
        b"".join(data) if isinstance(data, list) else data
    )
    text = raw[:256].hex()
    return text + (f"... ({len(raw)} bytes)" if len(raw) > 256 else "")


# --------------------------------------------------------------------------- report


@dataclass
class Report:
    options: Options
    stats: dict[Cell, CellStats]
    mutations: dict[str, Counter[str]]
    findings: list[dict[str, object]]
    honest: dict[str, object]
    seconds: float
    setup_seconds: float = 0.0

    def totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for s in self.stats.values():
            total.update(s.outcomes)
        return total

    @property
    def failures(self) -> int:
        totals = self.totals()
        return sum(totals[o] for o in FAILURES)

    @property
    def ok(self) -> bool:
        return self.failures == 0 and bool(self.honest.get("ok"))

    def table(self) -> str:
        columns = [
            ("sent", None), ("typed", "typed-error"), ("accepted", "accepted"),
            ("untyped", "untyped-error"), ("closed", "closed"), ("closed!", "unexpected-close"),
            ("hangs", "hang"), ("crashes", "crash"), ("setup!", "setup-failed"),
        ]
        head = (
            f"{'node':<6} {'frame':<17}" + "".join(f"{c:>9}" for c, _ in columns) + f"{'logged':>8}"
        )
        lines = [head, "-" * len(head)]
        total = CellStats()
        for cell, s in self.stats.items():
            row = [s.sent, *(s.outcomes[o] for _, o in columns[1:] if o is not None)]
            lines.append(
                f"{cell.node:<6} {cell.label:<17}" + "".join(f"{v:>9}" for v in row)
                + f"{s.logged_errors:>8}"
            )
            total.sent += s.sent
            total.outcomes.update(s.outcomes)
            total.logged_errors += s.logged_errors
        lines.append("-" * len(head))
        row = [total.sent, *(total.outcomes[o] for _, o in columns[1:] if o is not None)]
        lines.append(
            f"{'total':<24}" + "".join(f"{v:>9}" for v in row) + f"{total.logged_errors:>8}"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.options.seed,
            "frames": self.options.frames,
            "timeout": self.options.timeout,
            "seconds": round(self.seconds, 2),
            "ok": self.ok,
            "totals": dict(self.totals()),
            "cells": [
                {
                    "node": c.node,
                    "frame": c.label,
                    "sent": s.sent,
                    **{o: s.outcomes[o] for o in OUTCOMES},
                    "logged_errors": s.logged_errors,
                    "error_codes": dict(s.codes),
                    "replies": dict(s.replies),
                }
                for c, s in self.stats.items()
            ],
            "mutations": {k: dict(v) for k, v in sorted(self.mutations.items())},
            "findings": self.findings[:500],
            "honest": self.honest,
        }


async def run(options: Options) -> Report:
    """Start a chain, fuzz it, check an honest round, stop it; the report."""
    capture = LogCapture()
    logger = logging.getLogger("mixnet")
    saved = (logger.propagate, logger.level)
    logger.addHandler(capture)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    saved_wait = mixnet.sink.SUBSCRIBE_WAIT
    mixnet.sink.SUBSCRIBE_WAIT = SUBSCRIBE_WAIT
    policy = RoundPolicy(min_users=1, max_users=4, deadline_seconds=2.0, chunk_size=8)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="fuzz-chain-") as tmp:
            async with fuzz_chain(
                Path(tmp), mixes=1 + options.relays, messages=MESSAGES, policy=policy
            ) as chain:
                fuzzer = Fuzzer(chain, options, capture)
                await asyncio.wait_for(fuzzer.client.current_round(), 30)  # a round is open
                setup = time.monotonic() - started
                await fuzzer.campaign()
                if fuzzer.crashed:
                    honest: dict[str, object] = {"ok": False, "problems": ["a node crashed"]}
                else:
                    try:
                        honest = await fuzzer.honest_round()
                    except Exception as exc:  # reported, not raised: the table still prints
                        honest = {"ok": False, "problems": [f"{type(exc).__name__}: {exc}"]}
                await fuzzer.client.aclose()
                return Report(
                    options, fuzzer.stats, fuzzer.mutations, fuzzer.findings, honest,
                    time.monotonic() - started, setup,
                )
    finally:
        mixnet.sink.SUBSCRIBE_WAIT = saved_wait
        logger.removeHandler(capture)
        logger.propagate, _ = saved
        logger.setLevel(saved[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frames", type=int, default=5000, help="mutated frames in all")
    parser.add_argument("--seed", type=int, default=1, help="seed of the mutations")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    parser.add_argument("--relays", type=int, choices=(1, 2), default=2)
    parser.add_argument("--honest", type=int, default=6, help="honest submissions afterwards")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    options = Options(
        frames=args.frames, seed=args.seed, timeout=args.timeout, relays=args.relays,
        honest=args.honest, json_path=args.json, quiet=args.quiet,
    )
    report = asyncio.run(run(options))
    print(report.table())
    honest = report.honest
    print(
        f"\nhonest round: {'exact' if honest.get('ok') else 'NOT EXACT'}"
        f" ({honest.get('honest_clients', '?')} honest clients in rounds "
        f"{honest.get('honest_rounds', '?')}, fuzzer's accepted submissions by round "
        f"{honest.get('fuzz_accepted_by_round', '?')})"
    )
    problems = honest.get("problems")
    for problem in problems if isinstance(problems, list) else []:
        print(f"  {problem}")
    failures = [f for f in report.findings if f["outcome"] in FAILURES]
    logged = [f for f in report.findings if f["outcome"] not in FAILURES]
    if failures or logged:
        print(f"\n{len(failures)} failing frames, {len(logged)} more with errors in a node's log:")
        for f in report.findings[:20]:
            print(
                f"  #{f['frame']} {f['node']} {f['frame_type']} {f['mutation']}: "
                f"{f['outcome']} ({f['detail']})"
            )
    print(
        f"\n{sum(s.sent for s in report.stats.values())} frames, seed {options.seed}, "
        f"{report.seconds:.1f} s (chain start {report.setup_seconds:.1f} s)"
    )
    if options.json_path is not None:
        options.json_path.parent.mkdir(parents=True, exist_ok=True)
        options.json_path.write_text(json.dumps(report.to_json(), indent=2, default=repr) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
