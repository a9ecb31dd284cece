"""Benchmark: onion layers of format v2 against v1 and against the raw primitives, one run.

Everything is measured in one process, on one thread, on the same machine and the same
number of items, interleaved (repeat r runs every measurement once before repeat r + 1
starts, so load from other processes spreads over all of them) and reported as the best of
``--repeat`` runs (wall clock; the thread's CPU time is in the JSON too):

(a) **raw primitives** — per layer peeled, one X25519 scalar multiplication
    (``crypto_scalarmult``) and one ChaCha20-Poly1305-IETF decryption of the layer's
    ciphertext; per layer wrapped, one key pair (``crypto_box_keypair``), one scalar
    multiplication and one encryption. No key derivation, no checks, no Python around them
    but the loop. For v1, the raw libsodium sealed box (``crypto_box_seal`` /
    ``crypto_box_seal_open``).
(b) **format v2** (:mod:`mixnet.onion`): :func:`~mixnet.onion.peel_many` of the outer layer
    of ``--items`` onions of ``--hops`` layers, :func:`~mixnet.onion.wrap` of ``--items``
    onions, and :func:`~mixnet.onion.wrap_submission` of the submissions below.
(c) **format v1** (the sealed-box layers before format version 2, implemented here for the
    comparison): a layer is PyNaCl's sealed box (``nacl.public.SealedBox``, i.e.
    ``crypto_box_seal``) of ``binding_tag || inner``, where ``binding_tag`` is the 16-byte
    BLAKE2b of the length-prefixed ``mixnet/onion-layer-binding/v1``, chain id, round and
    hop (64 bytes per layer); peeling is ``crypto_box_seal_open`` and a constant-time
    compare of the tag. It is checked against a v1 test vector and ``SealedBox`` at start.
(d) **the entry mix**, per submission of ``m`` shares: v2 opens one box and cuts it into
    the ``m`` inner onions (``peel_many(..., split=m)``); v1 opened ``m`` per-share onions.

Ratios (``raw / format`` time: 1.0 means the format costs exactly its primitives; targets
from issue 14: v2 peel ≥ 0.95, v2 wrap ≥ 0.95) and ``v1 / v2`` time (> 1: v2 is faster).
Then the thread scaling of v2 peeling, and the wire bytes per user and hop at the default
plan (``cloaknet plan``'s selection, :func:`cloaknet.demo_plan.choose`, for ``--users``,
``--epsilon``, ``--delta``; ``m`` and the payload width, unless ``--messages`` /
``--payload`` are given, also set the shape of the items above). The load average before
and after is printed and written. Prints tables and writes JSON (``--json``, default
``bench-results/peel.json``)::

    .venv/bin/python scripts/bench_peel.py [--items 10000] [--repeat 5] [--hops 3]
        [--users 10000] [--epsilon 1] [--delta 1e-6] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import hmac
import json
import os
import platform
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nacl import bindings
from nacl._sodium import ffi, lib
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, SealedBox
from rich.console import Console
from rich.table import Table

from cloaknet.demo_plan import choose
from mixnet.onion import (
    LAYER_OVERHEAD,
    PUBLIC_KEY_LENGTH,
    binding_data,
    layer_key,
    onion_length,
    peel_many,
    submission_length,
    wrap,
    wrap_submission,
)

CHAIN_ID = "bench"
ROUND_ID = 1
CHUNK = 1024

# --------------------------------------------------------------------------- format v1

#: v1: the binding tag's domain string, the tag's length and the bytes each layer added
#: (a sealed box: 32-byte ephemeral key + 16-byte MAC, around the 16-byte tag).
V1_DOMAIN = b"mixnet/onion-layer-binding/v1"
V1_TAG_LENGTH = 16
V1_LAYER_OVERHEAD = 64
#: A v1 test vector (the wire vectors of format v1): chain, round, hop, tag.
V1_VECTOR = ("vectors", 7, 0, "28cec537c5645c2f4b7bf49b1d49eabe")


def _prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def v1_binding_tag(chain_id: str, round_id: int, hop_index: int) -> bytes:
    """The v1 binding tag: BLAKE2b-128 of the length-prefixed domain and chain id, the round
    (uint64) and the hop (uint16), big-endian."""
    message = (
        _prefixed(V1_DOMAIN)
        + _prefixed(chain_id.encode("utf-8"))
        + struct.pack(">QH", round_id, hop_index)
    )
    return hashlib.blake2b(message, digest_size=V1_TAG_LENGTH).digest()


def v1_onion_length(payload_length: int, layers: int) -> int:
    return payload_length + layers * V1_LAYER_OVERHEAD


def v1_wrap(
    payload: bytes, public_keys: Sequence[bytes], *, chain_id: str, round_id: int
) -> bytes:
    """A v1 onion: one sealed box of ``tag || inner`` per key, the first key's outermost
    (the binding tags computed per call, as v2's :func:`~mixnet.onion.wrap` does)."""
    tags = [v1_binding_tag(chain_id, round_id, hop) for hop in range(len(public_keys))]
    onion = payload
    for hop in reversed(range(len(public_keys))):
        onion = bindings.crypto_box_seal(tags[hop] + onion, public_keys[hop])
    return onion


def v1_peel_many(
    onions: Sequence[bytes],
    secret_key: PrivateKey,
    *,
    chain_id: str,
    round_id: int,
    hop_index: int,
    expected_length: int,
) -> list[bytes | None]:
    """Peel one v1 layer off every onion: the inner onion, or ``None`` for a wrong length,
    a box that does not open or a wrong binding tag."""
    tag = v1_binding_tag(chain_id, round_id, hop_index)
    secret, public = bytes(secret_key), bytes(secret_key.public_key)
    out: list[bytes | None] = []
    for onion in onions:
        if len(onion) != expected_length:
            out.append(None)
            continue
        try:
            plain = bindings.crypto_box_seal_open(onion, public, secret)
        except CryptoError:
            out.append(None)
            continue
        if not hmac.compare_digest(plain[:V1_TAG_LENGTH], tag):
            out.append(None)
            continue
        out.append(plain[V1_TAG_LENGTH:])
    return out


def check_v1(secret_key: PrivateKey) -> None:
    """The v1 implementation above against a v1 vector and PyNaCl's ``SealedBox``."""
    chain_id, round_id, hop, tag = V1_VECTOR
    assert v1_binding_tag(chain_id, round_id, hop).hex() == tag
    onion = v1_wrap(b"abc", [bytes(secret_key.public_key)], chain_id=CHAIN_ID, round_id=ROUND_ID)
    assert len(onion) == v1_onion_length(3, 1)
    plain = SealedBox(secret_key).decrypt(onion)
    assert plain == v1_binding_tag(CHAIN_ID, ROUND_ID, 0) + b"abc"
    peeled = v1_peel_many([onion], secret_key, chain_id=CHAIN_ID, round_id=ROUND_ID,
                          hop_index=0, expected_length=len(onion))  # fmt: skip
    assert peeled == [b"abc"]
    wrong = v1_peel_many([onion], secret_key, chain_id=CHAIN_ID, round_id=ROUND_ID + 1,
                         hop_index=0, expected_length=len(onion))  # fmt: skip
    assert wrong == [None]


# --------------------------------------------------------------------------- raw primitives


def raw_peel(ephemerals: Sequence[bytes], ciphertexts: Sequence[bytes], secret: bytes,
             aad: bytes, nonce: bytes, key: bytes) -> int:  # fmt: skip
    """One X25519 and one ChaCha20-Poly1305-IETF decryption per item, straight through
    libsodium's C functions (PyNaCl's CFFI module, no Python wrapper): the floor."""
    q = ffi.new("unsigned char[]", 32)
    done = 0
    for ephemeral, ciphertext in zip(ephemerals, ciphertexts, strict=True):
        lib.crypto_scalarmult(q, secret, ephemeral)
        out = ffi.new("unsigned char[]", max(1, len(ciphertext) - 16))
        rc = lib.crypto_aead_chacha20poly1305_ietf_decrypt(
            out, ffi.NULL, ffi.NULL, ciphertext, len(ciphertext), aad, len(aad), nonce, key
        )
        assert rc == 0
        ffi.buffer(out, len(ciphertext) - 16)[:]
        done += 1
    return done


def raw_wrap(count: int, plaintexts: Sequence[bytes], public: bytes, aad: bytes, nonce: bytes,
             key: bytes) -> int:  # fmt: skip
    """``count`` times, per plaintext (one per layer): a key pair, one X25519 and one
    ChaCha20-Poly1305-IETF encryption, straight through libsodium's C functions."""
    pk, sk, q = (ffi.new("unsigned char[]", 32) for _ in range(3))
    done = 0
    for _ in range(count):
        for plaintext in plaintexts:
            lib.crypto_box_keypair(pk, sk)
            lib.crypto_scalarmult(q, sk, public)
            out = ffi.new("unsigned char[]", len(plaintext) + 16)
            lib.crypto_aead_chacha20poly1305_ietf_encrypt(
                out, ffi.NULL, plaintext, len(plaintext), aad, len(aad), ffi.NULL, nonce, key
            )
            ffi.buffer(out, len(plaintext) + 16)[:]
        done += 1
    return done


def raw_seal_open(boxes: Sequence[bytes], public: bytes, secret: bytes) -> int:
    """One ``crypto_box_seal_open`` per item."""
    seal_open = bindings.crypto_box_seal_open
    for box in boxes:
        seal_open(box, public, secret)
    return len(boxes)


def raw_seal(count: int, plaintexts: Sequence[bytes], public: bytes) -> int:
    """``count`` times, one ``crypto_box_seal`` per plaintext (one per layer)."""
    seal = bindings.crypto_box_seal
    for _ in range(count):
        for plaintext in plaintexts:
            seal(plaintext, public)
    return count


# --------------------------------------------------------------------------- measuring


@dataclass
class Measure:
    """One measured operation over ``len(sizes)`` batches: ``run(b)`` does batch ``b`` and
    returns how many of its ``sizes[b]`` items succeeded (checked). Times are kept per
    repeat and batch."""

    key: str
    group: str
    label: str
    unit: str
    sizes: list[int]
    run: Callable[[int], int]
    wall: list[list[float]] = field(default_factory=list)
    cpu: list[list[float]] = field(default_factory=list)

    @property
    def items(self) -> int:
        return sum(self.sizes)

    def time_batch(self, repeat: int, batch: int) -> None:
        while len(self.wall) <= repeat:
            self.wall.append([])
            self.cpu.append([])
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        done = self.run(batch)
        wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
        if done != self.sizes[batch]:
            raise AssertionError(f"{self.key}: {done} of {self.sizes[batch]} items succeeded")
        self.wall[repeat].append(wall)
        self.cpu[repeat].append(cpu)

    @staticmethod
    def _best_per_batch(times: list[list[float]]) -> float:
        return float(sum(min(column) for column in zip(*times, strict=True)))

    @property
    def best(self) -> float:
        """Seconds for all items: each batch's best wall time over the repeats, summed."""
        return self._best_per_batch(self.wall)

    @property
    def best_cpu(self) -> float:
        """As :attr:`best`, on the thread's CPU time."""
        return self._best_per_batch(self.cpu)

    @property
    def best_run(self) -> float:
        """The best repeat's wall time for all items (best of whole runs)."""
        return min(sum(run) for run in self.wall)

    def record(self) -> dict[str, Any]:
        return {"group": self.group, "label": self.label, "items": self.items,
                "batches": len(self.sizes), "unit": self.unit,
                "best_seconds": self.best, "best_cpu_seconds": self.best_cpu,
                "best_run_seconds": self.best_run,
                "micros_per_item": self.best / self.items * 1e6,
                "items_per_second": self.items / self.best,
                "run_wall_seconds": [sum(run) for run in self.wall],
                "run_cpu_seconds": [sum(run) for run in self.cpu]}  # fmt: skip


def wire_bytes(messages: int, width: int, mixes: int) -> list[dict[str, Any]]:
    """Bytes one user's submission puts on the wire into each node, v1 and v2: at the entry
    mix its submission (v1: ``m`` onions, v2: one box), at hop ``h`` its ``m`` onions, at
    the analyzer its ``m`` payloads."""
    rows = []
    for hop in range(mixes + 1):
        node = f"mix{hop + 1}" if hop < mixes else "analyzer"
        layers = mixes - hop
        v1 = messages * v1_onion_length(width, layers)
        v2 = (submission_length(width, mixes, messages) if hop == 0
              else messages * onion_length(width, layers))  # fmt: skip
        rows.append({"hop": hop, "node": node, "v1_bytes": v1, "v2_bytes": v2,
                     "v2_over_v1": v2 / v1})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000,
                        help="layers peeled / onions wrapped per measurement; the entry-mix "
                        "rows use items // m submissions (default 10000)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=5, help="best of (default 5)")
    parser.add_argument("--batch", type=int, default=250,
                        help="items per timed batch (default 250; entry rows: batch // m "
                        "submissions)")  # fmt: skip
    parser.add_argument("--hops", type=int, default=3, help="mixes in the chain (default 3)")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--messages", type=int, default=None,
                        help="m, shares per submission (default: the plan's)")
    parser.add_argument("--payload", type=int, default=None,
                        help="payload bytes per share (default: the plan's)")
    parser.add_argument("--threads", default="1,2",
                        help="thread counts for the v2 peel scaling (default 1,2; '' skips)")
    parser.add_argument("--json", type=Path, default=Path("bench-results/peel.json"))
    args = parser.parse_args(argv)
    if min(args.items, args.repeat, args.hops, args.batch) < 1:
        parser.error("--items, --repeat, --hops and --batch must be >= 1")
    console = Console(width=140)

    choice = choose("plan", args.users, args.epsilon, args.delta)
    plan_m = choice.protocol.message_count
    plan_w = choice.protocol.bytes_per_message
    m = args.messages if args.messages is not None else plan_m
    width = args.payload if args.payload is not None else plan_w
    hops: int = args.hops
    n: int = args.items
    size: int = min(args.batch, n)
    batches = -(-n // size)
    per_batch = max(1, size // m)  # submissions per batch
    submissions = per_batch * batches
    load_before = os.getloadavg()

    keys = [PrivateKey.generate() for _ in range(hops)]
    public = [bytes(k.public_key) for k in keys]
    entry_secret, entry_public = bytes(keys[0]), public[0]
    check_v1(keys[0])

    # ---- items (not timed)
    console.log(f"making {n:,} onions of {hops} layers in each format, "
                f"{submissions:,} submission boxes of m = {m}")  # fmt: skip
    payloads = [os.urandom(width) for _ in range(n)]
    v2_length, v1_length = onion_length(width, hops), v1_onion_length(width, hops)
    v2_onions = [wrap(p, public, chain_id=CHAIN_ID, round_id=ROUND_ID) for p in payloads]
    v1_onions = [v1_wrap(p, public, chain_id=CHAIN_ID, round_id=ROUND_ID) for p in payloads]
    box_length = submission_length(width, hops, m)
    boxes = [wrap_submission([os.urandom(width) for _ in range(m)], public, chain_id=CHAIN_ID,
                             round_id=ROUND_ID) for _ in range(submissions)]  # fmt: skip
    # v1: the entry mix opened each of a submission's m onions
    v1_shares = [v1_wrap(os.urandom(width), public, chain_id=CHAIN_ID, round_id=ROUND_ID)
                 for _ in range(submissions * m)]  # fmt: skip
    # raw items: real ephemeral keys, ciphertexts of the layer's size under one fixed key
    aad = binding_data(chain_id=CHAIN_ID, round_id=ROUND_ID, hop_index=0)
    key, nonce = layer_key(os.urandom(32), os.urandom(32), entry_public)
    encrypt = bindings.crypto_aead_chacha20poly1305_ietf_encrypt
    ephemerals = [o[:PUBLIC_KEY_LENGTH] for o in v2_onions]
    layer_ct = [encrypt(os.urandom(v2_length - LAYER_OVERHEAD), aad, nonce, key)
                for _ in range(n)]  # fmt: skip
    box_ephemerals = [b[:PUBLIC_KEY_LENGTH] for b in boxes]
    box_ct = [encrypt(os.urandom(box_length - LAYER_OVERHEAD), aad, nonce, key)
              for _ in range(submissions)]  # fmt: skip
    v2_layer_plaintexts = [os.urandom(onion_length(width, i)) for i in range(hops)]
    sub_plaintexts = [os.urandom(onion_length(width, i)) for i in range(hops - 1)
                      for _ in range(m)] + [os.urandom(box_length - LAYER_OVERHEAD)]  # fmt: skip
    v1_layer_plaintexts = [os.urandom(V1_TAG_LENGTH + v1_onion_length(width, i))
                           for i in range(hops)]  # fmt: skip
    assert all(len(b) == box_length for b in boxes)
    assert len(sub_plaintexts) == m * (hops - 1) + 1

    def cut(items: Sequence[Any], b: int, width: int = size) -> Sequence[Any]:
        return items[b * width : (b + 1) * width]

    def peel_v2(b: int) -> int:
        out = peel_many(cut(v2_onions, b), keys[0], chain_id=CHAIN_ID, round_id=ROUND_ID,
                        hop_index=0, expected_length=v2_length)  # fmt: skip
        return sum(isinstance(o, bytes) for o in out)

    def peel_v1(b: int) -> int:
        out = v1_peel_many(cut(v1_onions, b), keys[0], chain_id=CHAIN_ID, round_id=ROUND_ID,
                           hop_index=0, expected_length=v1_length)  # fmt: skip
        return sum(o is not None for o in out)

    def wrap_v2(b: int) -> int:
        part = cut(payloads, b)
        for p in part:
            wrap(p, public, chain_id=CHAIN_ID, round_id=ROUND_ID)
        return len(part)

    def wrap_v1(b: int) -> int:
        part = cut(payloads, b)
        for p in part:
            v1_wrap(p, public, chain_id=CHAIN_ID, round_id=ROUND_ID)
        return len(part)

    def entry_v2(b: int) -> int:
        out = peel_many(cut(boxes, b, per_batch), keys[0], chain_id=CHAIN_ID,
                        round_id=ROUND_ID, hop_index=0, expected_length=box_length,
                        split=m)  # fmt: skip
        return sum(isinstance(o, bytes) for o in out) // m

    def entry_v1(b: int) -> int:
        out = v1_peel_many(cut(v1_shares, b, per_batch * m), keys[0], chain_id=CHAIN_ID,
                           round_id=ROUND_ID, hop_index=0,
                           expected_length=v1_length)  # fmt: skip
        return sum(o is not None for o in out) // m

    sub_payloads = [[os.urandom(width) for _ in range(m)] for _ in range(submissions)]

    def submission_v2(b: int) -> int:
        part = cut(sub_payloads, b, per_batch)
        for ps in part:
            wrap_submission(ps, public, chain_id=CHAIN_ID, round_id=ROUND_ID)
        return len(part)

    layer = f"{hops}-layer onion, {width}-byte payload"
    sizes = [len(cut(payloads, b)) for b in range(batches)]
    sub_sizes = [per_batch] * batches
    measures = [
        Measure("peel_raw", "peel", "raw: X25519 + ChaCha20-Poly1305 open", "layer", sizes,
                lambda b: raw_peel(cut(ephemerals, b), cut(layer_ct, b), entry_secret, aad,
                                   nonce, key)),
        Measure("peel_v2", "peel", f"v2 peel_many ({v2_length} B)", "layer", sizes, peel_v2),
        Measure("peel_v1_raw", "peel", "raw: crypto_box_seal_open", "layer", sizes,
                lambda b: raw_seal_open(cut(v1_onions, b), entry_public, entry_secret)),
        Measure("peel_v1", "peel", f"v1 peel: seal_open + tag ({v1_length} B)", "layer",
                sizes, peel_v1),
        Measure("wrap_raw", "wrap", f"raw: {hops} × (key pair + X25519 + ChaCha20-Poly1305)",
                "onion", sizes,
                lambda b: raw_wrap(sizes[b], v2_layer_plaintexts, entry_public, aad, nonce,
                                   key)),
        Measure("wrap_v2", "wrap", f"v2 wrap ({hops} layers)", "onion", sizes, wrap_v2),
        Measure("wrap_v1_raw", "wrap", f"raw: {hops} × crypto_box_seal", "onion", sizes,
                lambda b: raw_seal(sizes[b], v1_layer_plaintexts, entry_public)),
        Measure("wrap_v1", "wrap", f"v1 wrap ({hops} layers)", "onion", sizes, wrap_v1),
        Measure("entry_raw", "entry", "raw: 1 × (X25519 + ChaCha20-Poly1305 open)",
                "submission", sub_sizes,
                lambda b: raw_peel(cut(box_ephemerals, b, per_batch),
                                   cut(box_ct, b, per_batch), entry_secret, aad, nonce, key)),
        Measure("entry_v2", "entry", f"v2: open 1 box of {box_length} B (split = {m})",
                "submission", sub_sizes, entry_v2),
        Measure("entry_v1", "entry", f"v1: open {m} onions of {v1_length} B", "submission",
                sub_sizes, entry_v1),
        Measure("submission_raw", "submission",
                f"raw: {m * (hops - 1) + 1} × (key pair + X25519 + ChaCha20-Poly1305)",
                "submission", sub_sizes,
                lambda b: raw_wrap(per_batch, sub_plaintexts, entry_public, aad, nonce, key)),
        Measure("submission_v2", "submission", f"v2 wrap_submission (m = {m})", "submission",
                sub_sizes, submission_v2),
    ]  # fmt: skip
    for r in range(args.repeat):
        console.log(f"repeat {r + 1} of {args.repeat} (load average {os.getloadavg()[0]:.2f})")
        gc.collect()
        gc.disable()
        try:
            for b in range(batches):  # every measurement per batch, in a rotating order
                for i in range(len(measures)):
                    measures[(b + i) % len(measures)].time_batch(r, b)
        finally:
            gc.enable()
    by = {mm.key: mm for mm in measures}
    # v1 submission wrap: m v1 onions of `hops` layers each (the per-onion time measured)
    v1_submission = by["wrap_v1"].best / by["wrap_v1"].items * m

    def speed(raw: str, fmt: str) -> float:
        """raw time / format time per item (1.0: the format costs its primitives)."""
        return (by[raw].best / by[raw].items) / (by[fmt].best / by[fmt].items)

    ratios = {
        "v2_peel_over_raw": speed("peel_raw", "peel_v2"),
        "v2_wrap_over_raw": speed("wrap_raw", "wrap_v2"),
        "v2_entry_box_over_raw": speed("entry_raw", "entry_v2"),
        "v2_submission_wrap_over_raw": speed("submission_raw", "submission_v2"),
        "v1_peel_over_raw_seal_open": speed("peel_v1_raw", "peel_v1"),
        "v1_wrap_over_raw_seal": speed("wrap_v1_raw", "wrap_v1"),
        "v2_peel_speedup_over_v1": speed("peel_v1", "peel_v2"),
        "v2_wrap_speedup_over_v1": speed("wrap_v1", "wrap_v2"),
        "v2_entry_speedup_over_v1": speed("entry_v1", "entry_v2"),
        "v2_submission_wrap_speedup_over_v1": v1_submission
        / (by["submission_v2"].best / by["submission_v2"].items),
        # the same ratios on the thread's CPU time (less sensitive to other processes), and
        # on the best whole run (instead of each batch's best)
        "cpu_v2_peel_over_raw": (by["peel_raw"].best_cpu / by["peel_v2"].best_cpu),
        "cpu_v2_wrap_over_raw": (by["wrap_raw"].best_cpu / by["wrap_v2"].best_cpu),
        "cpu_v2_peel_speedup_over_v1": (by["peel_v1"].best_cpu / by["peel_v2"].best_cpu),
        "cpu_v2_wrap_speedup_over_v1": (by["wrap_v1"].best_cpu / by["wrap_v2"].best_cpu),
        "run_v2_peel_over_raw": (by["peel_raw"].best_run / by["peel_v2"].best_run),
        "run_v2_wrap_over_raw": (by["wrap_raw"].best_run / by["wrap_v2"].best_run),
    }
    targets = {"v2_peel_over_raw": 0.95, "v2_wrap_over_raw": 0.95}

    # ---- thread scaling of v2 peeling
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    chunks = [v2_onions[i : i + CHUNK] for i in range(0, n, CHUNK)]

    def peel_chunk(chunk: list[bytes]) -> int:
        out = peel_many(chunk, keys[0], chain_id=CHAIN_ID, round_id=ROUND_ID, hop_index=0,
                        expected_length=v2_length)  # fmt: skip
        return sum(isinstance(o, bytes) for o in out)

    scaling = []
    for count in threads:
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=count) as pool:
                ok = sum(pool.map(peel_chunk, chunks))
            best = min(best, time.perf_counter() - start)
            assert ok == n
        scaling.append({"threads": count, "seconds": best, "peels_per_second": n / best})
    load_after = os.getloadavg()

    # ---- tables
    title = (f"onion layers: {n:,} items ({layer}; entry rows: {submissions:,} submissions "
             f"of m = {m}) in {batches} batches, each batch's best of {args.repeat}, one "
             f"thread, {os.cpu_count()} CPUs, load average {load_before[0]:.2f} → "
             f"{load_after[0]:.2f}")  # fmt: skip
    table = Table(title=title)
    for col in ("operation", "per", "µs", "per second", "raw / this", "v1 / v2"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    raw_of = {"peel_v2": "peel_raw", "peel_v1": "peel_v1_raw", "wrap_v2": "wrap_raw",
              "wrap_v1": "wrap_v1_raw", "entry_v2": "entry_raw",
              "submission_v2": "submission_raw"}  # fmt: skip
    v1_of = {"peel_v2": "peel_v1", "wrap_v2": "wrap_v1", "entry_v2": "entry_v1"}
    group = None
    for mm in measures:
        if group is not None and mm.group != group:
            table.add_section()
        group = mm.group
        per = mm.best / mm.items
        raw_cell = f"{speed(raw_of[mm.key], mm.key):.3f}" if mm.key in raw_of else ""
        v1_cell = f"{speed(v1_of[mm.key], mm.key):.2f}×" if mm.key in v1_of else ""
        if mm.key == "submission_v2":
            v1_cell = f"{ratios['v2_submission_wrap_speedup_over_v1']:.2f}× (v1: m wraps)"
        table.add_row(mm.label, mm.unit, f"{per * 1e6:,.1f}", f"{1 / per:,.0f}", raw_cell,
                      v1_cell)  # fmt: skip
    console.print(table)
    for ratio, goal in targets.items():
        verdict = "meets" if ratios[ratio] >= goal else "MISSES"
        console.print(f"{ratio} = {ratios[ratio]:.3f} ({verdict} the target ≥ {goal}); "
                      f"on CPU time {ratios['cpu_' + ratio]:.3f}, best whole run "
                      f"{ratios['run_' + ratio]:.3f}")  # fmt: skip
    if scaling:
        st = Table(title=f"v2 peel_many in a thread pool ({CHUNK}-item chunks)")
        for col in ("threads", "best s", "peels/s", "speed-up"):
            st.add_column(col, justify="right")
        base = scaling[0]["peels_per_second"]
        for row in scaling:
            st.add_row(str(row["threads"]), f"{row['seconds']:.3f}",
                       f"{row['peels_per_second']:,.0f}",
                       f"{row['peels_per_second'] / base:.2f}×")  # fmt: skip
        console.print(st)

    wire = wire_bytes(plan_m, plan_w, hops)
    wt = Table(title=(f"wire bytes per user at the default plan: n = {args.users:,}, "
                      f"ε = {args.epsilon:g}, δ = {args.delta:g} → {choice.protocol.name}, "
                      f"m = {plan_m}, {plan_w}-byte payloads; {hops} mixes"))  # fmt: skip
    for col in ("hop", "into", "v1 bytes", "v2 bytes", "v2 / v1"):
        wt.add_column(col, justify="right")
    for hop_row in wire:
        wt.add_row(str(hop_row["hop"]), hop_row["node"], f"{hop_row['v1_bytes']:,}",
                   f"{hop_row['v2_bytes']:,}", f"{hop_row['v2_over_v1']:.2f}")  # fmt: skip
    console.print(wt)
    console.print(f"a user sends {wire[0]['v2_bytes']:,} bytes (v2) instead of "
                  f"{wire[0]['v1_bytes']:,} (v1) to the entry mix, for {plan_m * plan_w} "
                  "bytes of payload")  # fmt: skip

    record = {
        "items": n,
        "submissions": submissions,
        "messages": m,
        "payload": width,
        "hops": hops,
        "repeat": args.repeat,
        "batches": batches,
        "batch_items": size,
        "timing": "per measurement: the sum over batches of each batch's best wall time over "
        "the repeats; batches interleaved across measurements in a rotating order",
        "v2_onion_bytes": v2_length,
        "v1_onion_bytes": v1_length,
        "box_bytes": box_length,
        "measurements": {mm.key: mm.record() for mm in measures},
        "v1_submission_wrap_seconds_per_submission": v1_submission,
        "ratios": ratios,
        "targets": targets,
        "meets_targets": {k: ratios[k] >= t for k, t in targets.items()},
        "thread_scaling_v2_peel": scaling,
        "plan": {"users": args.users, "epsilon": args.epsilon, "delta": args.delta,
                 "protocol": choice.protocol.name, "messages": plan_m,
                 "payload": plan_w, "mixes": hops},
        "wire_bytes_per_user": wire,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "pynacl": version("pynacl"),
            "load_average_before": load_before,
            "load_average_after": load_after,
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2))
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
