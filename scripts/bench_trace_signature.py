#!/usr/bin/env python3
"""Benchmark: what signing a trace page and a refusal costs a mix, against the page's own
Chaum–Pedersen work (a benchmark, not a test).

A relay answers one ``trace`` page of ``--page`` accusations (the default is the last mix's
page at the default chunk size, :func:`mixnet.core.trace_caps.accusation_cap`), each with a
step at every hop from the relay's to the last of ``--mixes`` and a delivery with a
4,096-item chunk's audit path. Measured in this process with ``time.process_time``, best of
``--repeat``:

* ``sign_page_seconds`` / ``verify_page_seconds`` — :func:`mixnet.trace_signature.sign_page`
  and :func:`~mixnet.trace_signature.verify_page` over the whole page (the sender, and the
  receiver before it looks at the page);
* ``evidence_seconds`` — one refused accusation's evidence: its page proof and the refusal's
  signature (:meth:`mixnet.core.deliveries.ChunkSigning.refusal`), and the judge's two checks
  of them;
* ``prove_page_seconds`` / ``verify_steps_seconds`` — the page's DLEQ work it rides on: one
  Chaum–Pedersen proof per accusation (the relay's own step), and checking one proof per
  step of every accusation (the receiver's :func:`mixnet.dleq.verify_shared_secret`),
  measured on ``--dleq-sample`` of them and scaled to the page;
* ``overhead`` — (sign + verify) / (prove + verify steps).

Prints a table; ``--json FILE`` writes the record.

Usage::

    .venv/bin/python scripts/bench_trace_signature.py --json results/trace-signature/page.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nacl.public import PrivateKey
from nacl.signing import SigningKey
from rich.console import Console
from rich.table import Table

from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import Delivery
from mixnet.core.deliveries import ChunkSigning
from mixnet.core.trace_caps import accusation_cap
from mixnet.dleq import prove_shared_secret, verify_shared_secret
from mixnet.onion import onion_length
from mixnet.trace_signature import (
    sign_page,
    verify_on_page,
    verify_page,
    verify_refusal,
)


def best_of(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    """The least CPU time of ``repeat`` runs of ``run()``, and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        out = run()
        best = min(best, time.process_time() - start)
    return best, out


def page_of(count: int, mixes: int, payload: int) -> tuple[Accusation, ...]:
    """``count`` accusations as mix 2 sends them: a step at hops 1 … mixes − 1 (random items
    of each hop's length, a 32-byte secret, a 96-byte proof) and mix 1's delivery."""
    path = tuple(os.urandom(32) for _ in range(12))  # a 4,096-item chunk's
    page = []
    for i in range(count):
        steps = tuple(
            Step(hop, os.urandom(onion_length(payload, mixes - hop)), os.urandom(32),
                 os.urandom(96))
            for hop in range(1, mixes)
        )  # fmt: skip
        page.append(Accusation(Failure.INVALID_PAYLOAD, steps,
                               Delivery("mix1", i // 4096, 4096, i % 4096, path, os.urandom(64))))
    return tuple(page)


def measure(count: int, mixes: int, payload: int, repeat: int, sample: int) -> dict[str, Any]:
    key = SigningKey(os.urandom(32))
    identity = bytes(key.verify_key)
    signing = ChunkSigning("bench", ("mix1", "mix2"), {"mix2": identity}, None,
                           lambda message: bytes(key.sign(message).signature))  # fmt: skip
    page = page_of(count, mixes, payload)
    kw: dict[str, Any] = {"chain_id": "bench", "round_id": 1}
    sign = signing.sign_message
    assert sign is not None
    sign_s, signature = best_of(repeat, lambda: sign_page(sign, page, signer="mix2", **kw))
    verify_s, ok = best_of(repeat, lambda: verify_page(identity, signature, page, signer="mix2",
                                                       **kw))  # fmt: skip
    if not ok:
        raise SystemExit("the page's signature does not verify")
    position = count // 2

    def evidence() -> bool:
        proof, refusal = signing.refusal(1, "mix2", page, position, signature)
        return verify_on_page(page[position], proof, identity, signer="mix2", **kw) and (
            verify_refusal(identity, refusal, page[position], refuser="mix2", **kw)
        )

    evidence_s, ok = best_of(repeat, evidence)
    if not ok:
        raise SystemExit("the evidence does not verify")
    round_key = bytes(PrivateKey.generate())
    points = [bytes(PrivateKey.generate().public_key) for _ in range(sample)]
    prove_s, proofs = best_of(repeat, lambda: [prove_shared_secret(round_key, e, context=b"c")
                                               for e in points])  # fmt: skip
    public = bytes(PrivateKey(round_key).public_key)

    def check() -> None:
        for e, p in zip(points, proofs, strict=True):
            verify_shared_secret(public, e, p.shared_secret, p.to_bytes(), context=b"c")

    check_s, _ = best_of(repeat, check)
    prove_page = prove_s / sample * count
    verify_steps = check_s / sample * count * (mixes - 1)
    return {
        "page": count, "mixes": mixes, "payload_length": payload,
        "sign_page_seconds": sign_s, "verify_page_seconds": verify_s,
        "evidence_seconds": evidence_s,
        "prove_page_seconds": prove_page, "verify_steps_seconds": verify_steps,
        "overhead": (sign_s + verify_s) / (prove_page + verify_steps),
        "dleq_sample": sample,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average": list(os.getloadavg())},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", type=int, default=accusation_cap(4096, 3),
                        help="accusations on the page (682: the last mix's cap with the "
                             "default chunks of 4,096)")
    parser.add_argument("--mixes", type=int, default=3,
                        help="mixes in the chain; the page is mix 2's (3)")
    parser.add_argument("--payload", type=int, default=4,
                        help="bytes per payload (4: a default share)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timings of each measurement; the least is kept (3)")
    parser.add_argument("--dleq-sample", type=int, default=100,
                        help="Chaum–Pedersen proofs timed and scaled to the page (100)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the record here as JSON")
    args = parser.parse_args(argv)
    for name in ("page", "repeat", "dleq_sample", "payload"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.mixes < 3:
        parser.error("--mixes must be >= 3 (mix 2 must have a successor that accuses)")
    record = measure(args.page, args.mixes, args.payload, args.repeat, args.dleq_sample)
    table = Table(title=f"one trace page of {record['page']} accusations, mix 2 of "
                        f"{record['mixes']}: CPU")  # fmt: skip
    for column in ("sign page ms", "check page ms", "one evidence ms", "prove page s",
                   "check steps s", "overhead"):  # fmt: skip
        table.add_column(column, justify="right")
    table.add_row(f"{record['sign_page_seconds'] * 1e3:.2f}",
                  f"{record['verify_page_seconds'] * 1e3:.2f}",
                  f"{record['evidence_seconds'] * 1e3:.2f}",
                  f"{record['prove_page_seconds']:.3f}", f"{record['verify_steps_seconds']:.3f}",
                  f"{record['overhead']:.2%}")  # fmt: skip
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
