"""Regenerate the wire format's known-answer vectors, ``tests/mixnet/wire_vectors.json``.

The vectors belong to ``docs/wire.md`` (wire version 1). Every input is fixed: keys, seeds and
the onions' ephemeral secrets are BLAKE2b digests of labels, so running this script again
gives the same bytes. The one exception is the Chaum–Pedersen proofs of the trace, which are
randomized: a proof stored in the existing file is kept as long as it still verifies (so the
file is byte-stable), and ``--fresh-proofs`` makes new ones.

    .venv/bin/python scripts/wire_vectors.py            # rewrite the file
    .venv/bin/python scripts/wire_vectors.py --check    # exit 1 if the code makes other bytes

Run it deliberately: the tests (``tests/mixnet/test_wire_vectors.py`` and
``tests/cloaknet/test_wire_vectors_cloaknet.py``) check the code against the stored file, so
an encoding that changes breaks them until the change is accepted — which for anything a peer
sees means bumping the wire version (``docs/wire.md``, "Versioning").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from nacl import bindings
from nacl.signing import SigningKey

from cloaknet.analyzer_node import AnalyzerApp
from cloaknet.encoding import encode_share, quantize, split
from cloaknet.noise import noise_p, truncated_laplace_pmf
from cloaknet.params import share_width
from cloaknet.protocol_table import read_protocol_table
from cloaknet.protocols import CloakProtocol
from cloaknet.validator import payload_validator
from mixnet.blame import Accusation, Failure, Step, step_context, verify_accusation
from mixnet.chain import RoundPolicy
from mixnet.core.actions import DeliveredBatch
from mixnet.core.intake import item_digest, onion_digest
from mixnet.dleq import (
    InvalidProof,
    prove_shared_secret,
    sealed_box_key,
    sealed_box_nonce,
    verify_shared_secret,
)
from mixnet.errors import DuplicateClient
from mixnet.frames import (
    Aborted,
    AbortRound,
    Accepted,
    Accused,
    Batch,
    BatchAck,
    Exclude,
    Excluded,
    GetRound,
    OpenRound,
    RoundKeys,
    RoundOffer,
    Submit,
    Trace,
    to_wire,
)
from mixnet.keys import (
    RoundKeyAnnouncement,
    announce_round_key,
    public_key_text,
    sign_link_challenge,
    write_key_file,
)
from mixnet.onion import binding_tag, onion_length
from mixnet.wire import WIRE_VERSION, encode_frame, error_frame

OUT = Path(__file__).resolve().parents[1] / "tests" / "mixnet" / "wire_vectors.json"

CHAIN_ID = "vectors"
ROUND = 7
MIXES = ("mix1", "mix2", "mix3")
SINK = "analyzer"
MESSAGES = 4
MODULUS = 6823978027
PRECISION = 100000
DEADLINE = 1767225630.25
COMPLETED_AT = 1767225700.0
#: mallory's share #2 is this payload: 5 bytes whose value is >= MODULUS.
BAD_PAYLOAD = b"\xff" * 5
ALICE_X = 0.42
#: The order in which mix1 forwards the hop-1 items (client, onion index): its permutation.
MIX1_ORDER = (
    ("alice", 2), ("mallory", 0), ("alice", 0), ("mallory", 3),
    ("mallory", 1), ("alice", 3), ("alice", 1), ("mallory", 2),
)  # fmt: skip
#: The order in which mix3 hands alice's payloads to the analyzer.
MIX3_ORDER = (3, 0, 2, 1)

SUM_PRESERVING_TABLE = f"""\
[protocol]
mode = "sum-preserving"
messages = {MESSAGES}
modulus = "{MODULUS}"
precision = {PRECISION}
max_users = 1000
"""

SINGLE_USER_TABLE = """\
[protocol]
mode = "single-user"
messages = 49
modulus = "6823978027"
precision = 100000
max_users = 1000
noise_scale = "208333/1"
noise_q = "81028/43980465111"
"""


# --------------------------------------------------------------------------- helpers


def fixed(label: str, size: int = 32) -> bytes:
    """A fixed pseudo-random byte string: BLAKE2b of ``"wire-vectors/" + label``."""
    return hashlib.blake2b(f"wire-vectors/{label}".encode(), digest_size=size).digest()


def fixed_below(label: str, bound: int) -> int:
    """A fixed integer in ``[0, bound)`` derived from ``label``."""
    return int.from_bytes(fixed(label, 16), "big") % bound


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def prefixed(data: bytes) -> bytes:
    return u32(len(data)) + data


def jsonable(value: object) -> Any:
    """Frame values as JSON: bytes become ``{"bin": "<hex>"}``; the rest is kept."""
    if isinstance(value, bytes):
        return {"bin": value.hex()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


class FixedShares:
    """A :class:`~cloaknet.randomness.RandomSource` whose ``randbelow`` returns given values
    (to run Algorithm 1 with fixed random shares)."""

    def __init__(self, values: Sequence[int]) -> None:
        self._values = list(values)

    def randbelow(self, upper: int) -> int:
        value = self._values.pop(0)
        assert 0 <= value < upper
        return value

    def token_bytes(self, nbytes: int) -> bytes:
        raise AssertionError("not used")


# --------------------------------------------------------------------------- the chain


class Mix:
    def __init__(self, hop: int, name: str) -> None:
        self.hop = hop
        self.name = name
        self.identity = SigningKey(fixed(f"identity/{name}"))
        self.round_secret = fixed(f"round-key/{name}/{ROUND}")
        self.round_public = bytes(bindings.crypto_scalarmult_base(self.round_secret))
        self.announcement = announce_round_key(
            self.identity,
            chain_id=CHAIN_ID,
            node=name,
            round_id=ROUND,
            public_key=self.round_public,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hop": self.hop,
            "identity_seed": bytes(self.identity).hex(),
            "identity_public": bytes(self.identity.verify_key).hex(),
            "identity_text": public_key_text(self.identity.verify_key),
            "round_secret": self.round_secret.hex(),
            "round_public": self.round_public.hex(),
        }


def announcement_vector(ann: RoundKeyAnnouncement) -> dict[str, Any]:
    signed = b"".join(
        (
            prefixed(b"mixnet/round-key-announcement/v1"),
            prefixed(ann.chain_id.encode()),
            prefixed(ann.node.encode()),
            struct.pack(">Q", ann.round_id),
            prefixed(ann.public_key),
        )
    )
    assert signed == ann.signed_bytes()
    return {
        "chain_id": ann.chain_id,
        "node": ann.node,
        "round": ann.round_id,
        "public_key": ann.public_key.hex(),
        "signed_bytes": signed.hex(),
        "signature": ann.signature.hex(),
    }


def binding_vector(chain_id: str, round_id: int, hop: int) -> dict[str, Any]:
    message = (
        prefixed(b"mixnet/onion-layer-binding/v1")
        + prefixed(chain_id.encode())
        + struct.pack(">QH", round_id, hop)
    )
    tag = hashlib.blake2b(message, digest_size=16).digest()
    assert tag == binding_tag(chain_id=chain_id, round_id=round_id, hop_index=hop)
    return {
        "chain_id": chain_id,
        "round": round_id,
        "hop": hop,
        "message": message.hex(),
        "tag": tag.hex(),
    }


def build_onion(
    client: str, index: int, payload: bytes, mixes: Sequence[Mix]
) -> dict[str, Any]:
    """One onion built innermost first with fixed ephemeral secrets (docs/wire.md, "Onions")."""
    layers: list[dict[str, Any]] = []
    inner = payload
    for mix in reversed(mixes):
        ephemeral_secret = fixed(f"ephemeral/{client}/{index}/{mix.hop}")
        ephemeral_public = bytes(bindings.crypto_scalarmult_base(ephemeral_secret))
        shared = bytes(bindings.crypto_scalarmult(ephemeral_secret, mix.round_public))
        box_key = bytes(bindings.crypto_box_beforenm(mix.round_public, ephemeral_secret))
        assert box_key == sealed_box_key(shared)
        nonce = hashlib.blake2b(ephemeral_public + mix.round_public, digest_size=24).digest()
        assert nonce == sealed_box_nonce(ephemeral_public, mix.round_public)
        tag = binding_tag(chain_id=CHAIN_ID, round_id=ROUND, hop_index=mix.hop)
        plaintext = tag + inner
        boxed = bytes(
            bindings.crypto_box(plaintext, nonce, mix.round_public, ephemeral_secret)
        )
        sealed = ephemeral_public + boxed
        assert len(sealed) == onion_length(len(payload), len(mixes) - mix.hop)
        layers.append(
            {
                "hop": mix.hop,
                "recipient": mix.name,
                "recipient_public": mix.round_public.hex(),
                "ephemeral_secret": ephemeral_secret.hex(),
                "ephemeral_public": ephemeral_public.hex(),
                "shared_secret": shared.hex(),
                "box_key": box_key.hex(),
                "nonce": nonce.hex(),
                "binding_tag": tag.hex(),
                "plaintext": plaintext.hex(),
                "sealed": sealed.hex(),
            }
        )
        inner = sealed
    layers.reverse()
    return {
        "client": client,
        "index": index,
        "payload": payload.hex(),
        "onion": inner.hex(),
        "layers": layers,
    }


def layer_item(onion: Mapping[str, Any], hop: int) -> bytes:
    """The item mix ``hop`` receives for this onion (its layer, sealed)."""
    return bytes.fromhex(onion["layers"][hop]["sealed"])


def make_step(
    mix: Mix, item: bytes, stored: Mapping[str, Any] | None, fresh: bool
) -> tuple[Step, dict[str, Any]]:
    """Mix ``mix``'s step about ``item``: a stored proof if it still verifies, else a new one."""
    context = step_context(chain_id=CHAIN_ID, round_id=ROUND, hop=mix.hop, item=item)
    manual = (
        prefixed(b"mixnet/blame-step/v1")
        + prefixed(CHAIN_ID.encode())
        + struct.pack(">QH", ROUND, mix.hop)
        + hashlib.blake2b(item, digest_size=32).digest()
    )
    assert manual == context
    secret = bytes(bindings.crypto_scalarmult(mix.round_secret, item[:32]))
    proof: bytes | None = None
    if stored is not None and not fresh:
        candidate = bytes.fromhex(stored["proof"])
        try:
            verify_shared_secret(mix.round_public, item[:32], secret, candidate, context=context)
        except InvalidProof:
            pass
        else:
            proof = candidate
    if proof is None:
        made = prove_shared_secret(mix.round_secret, item[:32], context=context)
        assert made.shared_secret == secret
        proof = made.to_bytes()
    step = Step(mix.hop, item, secret, proof)
    return step, {
        "hop": mix.hop,
        "node": mix.name,
        "item": item.hex(),
        "ephemeral_public": item[:32].hex(),
        "shared_secret": secret.hex(),
        "context": context.hex(),
        "proof": proof.hex(),
    }


def frame_vector(
    name: str, sender: str, receiver: str, parse: str, fields: Mapping[str, object]
) -> dict[str, Any]:
    """A frame as the code encodes it. ``parse`` says how the receiver decodes it
    (``request``/``reply`` with the receiver's limits, or a dedicated parser)."""
    return {
        "name": name,
        "from": sender,
        "to": receiver,
        "parse": parse,
        "fields": jsonable(fields),
        "msgpack": encode_frame(fields).hex(),
    }


# --------------------------------------------------------------------------- the vectors


def build(previous: Mapping[str, Any] | None, *, fresh_proofs: bool) -> dict[str, Any]:
    mixes = [Mix(hop, name) for hop, name in enumerate(MIXES)]
    width = share_width(MODULUS)
    hops = len(mixes)

    # -- cloaknet: the protocol, alice's encoding, mallory's shares
    policy = RoundPolicy(min_users=1, max_users=5, deadline_seconds=600.0)
    protocol, plan = read_protocol_table(tomllib.loads(SUM_PRESERVING_TABLE)["protocol"], policy)
    assert plan is None and isinstance(protocol, CloakProtocol)
    assert protocol.message_count == MESSAGES and protocol.bytes_per_message == width
    single, _ = read_protocol_table(tomllib.loads(SINGLE_USER_TABLE)["protocol"], policy)
    assert isinstance(single, CloakProtocol) and single.params.noise is not None
    params = protocol.params
    random_shares = [fixed_below(f"share/alice/{i}", MODULUS) for i in range(MESSAGES - 1)]
    quantized = quantize(ALICE_X, PRECISION)
    alice_shares = split(quantized, MESSAGES, MODULUS, FixedShares(random_shares))
    assert alice_shares == protocol.encode_value(ALICE_X, FixedShares(random_shares))
    alice_payloads = [encode_share(y, MODULUS) for y in alice_shares]
    mallory_payloads = [
        encode_share(fixed_below(f"share/mallory/{i}", MODULUS), MODULUS) for i in range(MESSAGES)
    ]
    mallory_payloads[2] = BAD_PAYLOAD
    valid = payload_validator(protocol)
    assert all(valid(p) for p in alice_payloads) and not valid(BAD_PAYLOAD)

    # -- onions
    onions = {
        (client, index): build_onion(client, index, payload, mixes)
        for client, payloads in (("alice", alice_payloads), ("mallory", mallory_payloads))
        for index, payload in enumerate(payloads)
    }
    alice_onions = [bytes.fromhex(onions["alice", i]["onion"]) for i in range(MESSAGES)]

    # -- the trace: mallory's onion 2 holds a payload >= N
    stored_steps: list[Mapping[str, Any]] = []
    if previous is not None:
        stored_steps = list(previous.get("trace", {}).get("steps", []))
    bad = onions["mallory", 2]
    steps: list[Step] = []
    step_vectors: list[dict[str, Any]] = []
    for hop in (1, 2):
        item = layer_item(bad, hop)
        stored = next(
            (s for s in stored_steps if s["hop"] == hop and s["item"] == item.hex()), None
        )
        step, vector = make_step(mixes[hop], item, stored, fresh_proofs)
        steps.append(step)
        step_vectors.append(vector)
    accusation = Accusation(Failure.INVALID_PAYLOAD, tuple(steps))
    last_only = Accusation(Failure.INVALID_PAYLOAD, (steps[1],))
    keys = {mix.hop: mix.round_public for mix in mixes}
    verify_accusation(
        accusation, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=hops, validator=valid
    )

    # -- frames
    announcements = tuple(mix.announcement for mix in mixes)
    hop1_items = [layer_item(onions[key], 1) for key in MIX1_ORDER]
    mallory_hop1 = [layer_item(onions["mallory", i], 1) for i in range(MESSAGES)]
    delivered = [alice_payloads[i] for i in MIX3_ORDER]
    result = AnalyzerApp(protocol, clock=lambda: COMPLETED_AT).analyze(
        ROUND, DeliveredBatch(1, MESSAGES, tuple(delivered), 1)
    )
    challenge = fixed("link-challenge")
    link_signature = sign_link_challenge(
        mixes[0].identity, chain_id=CHAIN_ID, node=mixes[0].name, challenge=challenge
    )
    m1, m2, m3 = MIXES
    frames = [
        frame_vector("get-round", "client", m1, "request", to_wire(GetRound())),
        frame_vector(
            "round", m1, "client", "reply",
            to_wire(
                RoundOffer(
                    round_id=ROUND, deadline=DEADLINE, messages=MESSAGES, payload_length=width,
                    clients=0, min_clients=1, max_clients=5, announcements=announcements,
                )
            ),
        ),
        frame_vector(
            "submit", "client", m1, "request",
            to_wire(Submit(ROUND, "alice", tuple(alice_onions))),
        ),
        frame_vector("accepted", m1, "client", "reply", to_wire(Accepted(ROUND, "alice"))),
        frame_vector(
            "error", m1, "client", "error",
            error_frame(DuplicateClient(f"client 'alice' already submitted in round {ROUND}")),
        ),
        frame_vector("challenge (request)", m1, m2, "none", {"type": "challenge"}),
        frame_vector(
            "challenge (reply)", m2, m1, "none", {"type": "challenge", "nonce": challenge}
        ),
        frame_vector(
            "authenticate", m1, m2, "authenticate",
            {"type": "authenticate", "node": m1, "signature": link_signature},
        ),
        frame_vector("authenticated", m2, m1, "none", {"type": "authenticated", "node": m1}),
        frame_vector("open-round", m1, m2, "request", to_wire(OpenRound(ROUND))),
        frame_vector(
            "round-keys", m2, m1, "reply", to_wire(RoundKeys(ROUND, announcements[1:]))
        ),
        frame_vector("abort-round", m1, m2, "request", to_wire(AbortRound(ROUND + 1))),
        frame_vector("aborted", m2, m1, "reply", to_wire(Aborted(ROUND + 1))),
        frame_vector(
            "batch", m1, m2, "request",
            to_wire(Batch(ROUND, m1, 0, 1, 2, len(hop1_items), tuple(hop1_items))),
        ),
        frame_vector("batch-ack", m2, m1, "reply", to_wire(BatchAck(ROUND, 0))),
        frame_vector("trace", m1, m2, "request", to_wire(Trace(ROUND))),
        frame_vector(
            "accused (mix3 to mix2)", m3, m2, "reply", to_wire(Accused(ROUND, (last_only,)))
        ),
        frame_vector("accused", m2, m1, "reply", to_wire(Accused(ROUND, (accusation,)))),
        frame_vector(
            "exclude", m1, m2, "request", to_wire(Exclude(ROUND, tuple(mallory_hop1), 1))
        ),
        frame_vector("excluded", m2, m1, "reply", to_wire(Excluded(ROUND))),
        frame_vector(
            "batch (to the analyzer)", m3, SINK, "request",
            to_wire(Batch(ROUND, m3, 0, 1, 1, MESSAGES, tuple(delivered), excluded=1)),
        ),
        frame_vector(
            "subscribe", "client", SINK, "subscribe", {"type": "subscribe", "round": ROUND}
        ),
        frame_vector("pending", SINK, "client", "none", {"type": "pending", "round": ROUND}),
        frame_vector("result", SINK, "client", "none", {"type": "result", **result}),
    ]  # fmt: skip

    # -- key file, as `cloaknet keygen` writes it
    with tempfile.TemporaryDirectory() as scratch:
        key_path = Path(scratch) / f"{mixes[0].name}.key"
        write_key_file(key_path, mixes[0].identity, name=mixes[0].name)
        key_text = key_path.read_text(encoding="utf-8")

    binding = [binding_vector(CHAIN_ID, ROUND, hop) for hop in range(hops)]
    binding.append(binding_vector("survey-2026", (1 << 63) - 1, 65535))

    noise = single.params.noise
    pmf_modulus, pmf_scale = 7, Fraction(2)
    p = noise_p(pmf_scale)

    return {
        "about": (
            "Known-answer vectors of the cloaknet wire format, wire version 1 (docs/wire.md). "
            "Byte strings are lowercase hex; in 'fields' a msgpack bin value is "
            '{"bin": "<hex>"}. Regenerate deliberately with scripts/wire_vectors.py.'
        ),
        "wire_version": WIRE_VERSION,
        "chain": {
            "id": CHAIN_ID,
            "round": ROUND,
            "mixes": [mix.describe() for mix in mixes],
            "sink": SINK,
            "messages": MESSAGES,
            "payload_length": width,
            "onion_lengths": [onion_length(width, hops - hop) for hop in range(hops + 1)],
        },
        "key_file": {
            "name": mixes[0].name,
            "seed": bytes(mixes[0].identity).hex(),
            "public_key_text": public_key_text(mixes[0].identity.verify_key),
            "text": key_text,
        },
        "binding_tags": binding,
        "announcements": [announcement_vector(a) for a in announcements],
        "link_authentication": {
            "chain_id": CHAIN_ID,
            "node": mixes[0].name,
            "challenge": challenge.hex(),
            "signed_bytes": (
                prefixed(b"mixnet/link-authentication/v1")
                + prefixed(CHAIN_ID.encode())
                + prefixed(mixes[0].name.encode())
                + prefixed(challenge)
            ).hex(),
            "signature": link_signature.hex(),
        },
        "onions": list(onions.values()),
        "submission": {
            "client": "alice",
            "onions": [o.hex() for o in alice_onions],
            "onion_digest": onion_digest(alice_onions).hex(),
            "item_digests": [item_digest(o).hex() for o in alice_onions],
        },
        "trace": {
            "accused": {"client": "mallory", "index": 2},
            "failure": Failure.INVALID_PAYLOAD.value,
            "validator": {"width": width, "modulus": str(MODULUS)},
            "steps": step_vectors,
        },
        "frames": frames,
        "cloaknet": {
            "protocol_tables": [
                {
                    "toml": SUM_PRESERVING_TABLE,
                    "mode": params.mode,
                    "messages": params.messages,
                    "modulus": str(params.modulus),
                    "precision": params.precision,
                    "max_users": params.max_users,
                    "payload_length": width,
                },
                {
                    "toml": SINGLE_USER_TABLE,
                    "mode": single.params.mode,
                    "messages": single.params.messages,
                    "modulus": str(single.params.modulus),
                    "precision": single.params.precision,
                    "max_users": single.params.max_users,
                    "payload_length": share_width(single.params.modulus),
                    "noise_scale": f"{noise.scale.numerator}/{noise.scale.denominator}",
                    "noise_q": f"{noise.q.numerator}/{noise.q.denominator}",
                    "noise_p": noise.p,
                },
            ],
            "share_widths": [
                {"modulus": str(n), "width": share_width(n)}
                for n in (2, 3, 255, 256, 257, 65537, MODULUS, (1 << 64) - 59, (1 << 64) + 13)
            ],
            "share_encodings": [
                {"modulus": str(n), "value": str(v), "bytes": encode_share(v, n).hex()}
                for n, v in (
                    (3, 2),
                    (MODULUS, 0),
                    (MODULUS, 41999),
                    (MODULUS, MODULUS - 1),
                    ((1 << 64) + 13, (1 << 64) + 12),
                )
            ],
            "encoder": {
                "client": "alice",
                "x": ALICE_X,
                "precision": PRECISION,
                "modulus": str(MODULUS),
                "quantized": quantized,
                "random_shares": random_shares,
                "shares": alice_shares,
                "payloads": [p.hex() for p in alice_payloads],
            },
            "invalid_payloads": [BAD_PAYLOAD.hex(), "00", (b"\x00" * 6).hex()],
            "noise_pmf": {
                "modulus": pmf_modulus,
                "scale": str(pmf_scale),
                "p": p,
                "pmf": [
                    [j, truncated_laplace_pmf(j, pmf_modulus, p)]
                    for j in range(-(pmf_modulus // 2), pmf_modulus // 2 + 1)
                ],
            },
            "result": {
                "round": ROUND,
                "clients": 1,
                "count": MESSAGES,
                "excluded": 1,
                "payloads": [p.hex() for p in delivered],
                "clock": COMPLETED_AT,
                "result": result,
            },
        },
    }


def render(vectors: Mapping[str, Any]) -> str:
    return json.dumps(vectors, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    parser.add_argument(
        "--check", action="store_true", help="compare with the file instead of writing it"
    )
    parser.add_argument(
        "--fresh-proofs", action="store_true", help="make new Chaum–Pedersen proofs"
    )
    args = parser.parse_args(argv)
    previous: dict[str, Any] | None = None
    if args.out.exists():
        previous = json.loads(args.out.read_text(encoding="utf-8"))
    text = render(build(previous, fresh_proofs=args.fresh_proofs))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} differs from what the code makes now", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
