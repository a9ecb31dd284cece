"""Known-answer tests of the wire format (``docs/wire.md``, wire version 1).

Every vector in ``wire_vectors.json`` (next to this file) is checked twice where possible:
rebuilt byte by byte from the construction the specification gives (BLAKE2b inputs, length
prefixes, libsodium's ``crypto_box`` with a fixed ephemeral key, ...), and reproduced or
accepted by the code (:mod:`mixnet.onion`, :mod:`mixnet.keys`, :mod:`mixnet.blame`,
:mod:`mixnet.frames`, :mod:`mixnet.wire`). A change to any encoding a peer sees therefore
breaks these tests; regenerate the file deliberately with ``scripts/wire_vectors.py`` (and
bump the wire version if peers are affected). The share encoding and the analyzer's result
are checked in ``tests/cloaknet/test_wire_vectors_cloaknet.py`` (this package runs with
cloaknet unimportable).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from nacl import bindings
from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey

from mixnet.blame import (
    Accusation,
    Failure,
    InvalidEvidence,
    Step,
    accept_all,
    open_layer,
    step_context,
    verify_accusation,
)
from mixnet.core.intake import item_digest, onion_digest
from mixnet.dleq import (
    InvalidProof,
    sealed_box_key,
    sealed_box_nonce,
    verify_shared_secret,
)
from mixnet.errors import BadSignature, BindingMismatch, DecryptionFailed, DuplicateClient
from mixnet.frames import (
    FrameLimits,
    parse_authenticate,
    parse_reply,
    parse_request,
    parse_subscribe,
    to_wire,
)
from mixnet.keys import (
    RoundKeyAnnouncement,
    parse_public_key,
    public_key_text,
    read_key_file,
    sign_link_challenge,
    verify_link_signature,
    write_key_file,
)
from mixnet.onion import LAYER_OVERHEAD, binding_tag, onion_length, peel_many, wrap
from mixnet.wire import WIRE_VERSION, decode_frame, encode_frame, error_from_frame

VECTORS_PATH = Path(__file__).with_name("wire_vectors.json")
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CHAIN: dict[str, Any] = VECTORS["chain"]
CHAIN_ID: str = CHAIN["id"]
ROUND: int = CHAIN["round"]
MIXES: list[dict[str, Any]] = CHAIN["mixes"]
HOPS = len(MIXES)
WIDTH: int = CHAIN["payload_length"]


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def prefixed(data: bytes) -> bytes:
    """``u32be(len(data)) || data``, the length prefix of every signed or hashed string."""
    return struct.pack(">I", len(data)) + data


def from_json(value: Any) -> Any:
    """A frame field as stored in the vectors: ``{"bin": "<hex>"}`` is msgpack bin."""
    if isinstance(value, dict):
        if set(value) == {"bin"}:
            return h(value["bin"])
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def round_key(hop: int) -> PrivateKey:
    return PrivateKey(h(MIXES[hop]["round_secret"]))


def onion_vector(client: str, index: int) -> dict[str, Any]:
    for onion in VECTORS["onions"]:
        if (onion["client"], onion["index"]) == (client, index):
            return dict(onion)
    raise KeyError((client, index))


def inner_of(onion: Mapping[str, Any], hop: int) -> bytes:
    """What layer ``hop`` holds after its binding tag: the next layer, or the payload."""
    if hop + 1 < HOPS:
        return h(onion["layers"][hop + 1]["sealed"])
    return h(onion["payload"])


def test_the_vectors_are_for_this_wire_version() -> None:
    assert VECTORS["wire_version"] == WIRE_VERSION == 1


def test_onion_lengths_per_hop() -> None:
    lengths = [onion_length(WIDTH, HOPS - hop) for hop in range(HOPS + 1)]
    assert lengths == CHAIN["onion_lengths"] == [WIDTH + 64 * (HOPS - i) for i in range(HOPS + 1)]
    assert LAYER_OVERHEAD == 64


# --------------------------------------------------------------------------- keys


def test_identity_key_file(tmp_path: Path) -> None:
    vector = VECTORS["key_file"]
    key = SigningKey(h(vector["seed"]))
    path = tmp_path / "mix1.key"
    write_key_file(path, key, name=vector["name"])
    assert path.read_text(encoding="utf-8") == vector["text"]
    assert bytes(read_key_file(path)) == h(vector["seed"])
    assert public_key_text(key.verify_key) == vector["public_key_text"]


@pytest.mark.parametrize("mix", MIXES, ids=[m["name"] for m in MIXES])
def test_identity_and_round_keys(mix: dict[str, Any]) -> None:
    identity = SigningKey(h(mix["identity_seed"]))
    assert bytes(identity.verify_key).hex() == mix["identity_public"]
    assert bytes(parse_public_key(mix["identity_text"])) == h(mix["identity_public"])
    round_public = bindings.crypto_scalarmult_base(h(mix["round_secret"]))
    assert round_public.hex() == mix["round_public"]


@pytest.mark.parametrize(
    "vector", VECTORS["announcements"], ids=[a["node"] for a in VECTORS["announcements"]]
)
def test_round_key_announcement(vector: dict[str, Any]) -> None:
    manual = b"".join(
        (
            prefixed(b"mixnet/round-key-announcement/v1"),
            prefixed(vector["chain_id"].encode("utf-8")),
            prefixed(vector["node"].encode("utf-8")),
            struct.pack(">Q", vector["round"]),
            prefixed(h(vector["public_key"])),
        )
    )
    assert manual.hex() == vector["signed_bytes"]
    announcement = RoundKeyAnnouncement(
        chain_id=vector["chain_id"],
        node=vector["node"],
        round_id=vector["round"],
        public_key=h(vector["public_key"]),
        signature=h(vector["signature"]),
    )
    assert announcement.signed_bytes() == manual
    mix = next(m for m in MIXES if m["name"] == vector["node"])
    # Ed25519 (RFC 8032) is deterministic: the signature is reproduced exactly
    signature = SigningKey(h(mix["identity_seed"])).sign(manual).signature
    assert signature.hex() == vector["signature"]
    identity = VerifyKey(h(mix["identity_public"]))
    announcement.verify(identity)
    forged = RoundKeyAnnouncement(
        chain_id=vector["chain_id"],
        node=vector["node"],
        round_id=vector["round"] + 1,
        public_key=h(vector["public_key"]),
        signature=h(vector["signature"]),
    )
    with pytest.raises(BadSignature):
        forged.verify(identity)


def test_link_authentication() -> None:
    vector = VECTORS["link_authentication"]
    challenge = h(vector["challenge"])
    manual = (
        prefixed(b"mixnet/link-authentication/v1")
        + prefixed(vector["chain_id"].encode("utf-8"))
        + prefixed(vector["node"].encode("utf-8"))
        + prefixed(challenge)
    )
    assert manual.hex() == vector["signed_bytes"]
    mix = next(m for m in MIXES if m["name"] == vector["node"])
    key = SigningKey(h(mix["identity_seed"]))
    signature = sign_link_challenge(
        key, chain_id=vector["chain_id"], node=vector["node"], challenge=challenge
    )
    assert signature.hex() == vector["signature"]
    assert key.sign(manual).signature == signature
    verify_link_signature(
        key.verify_key, signature, chain_id=vector["chain_id"], node=vector["node"],
        challenge=challenge,
    )  # fmt: skip
    with pytest.raises(BadSignature):
        verify_link_signature(
            key.verify_key, signature, chain_id=vector["chain_id"], node="mix2",
            challenge=challenge,
        )  # fmt: skip


# --------------------------------------------------------------------------- onions


@pytest.mark.parametrize(
    "vector",
    VECTORS["binding_tags"],
    ids=[f"{v['chain_id']}-{v['round']}-{v['hop']}" for v in VECTORS["binding_tags"]],
)
def test_binding_tag(vector: dict[str, Any]) -> None:
    manual = (
        prefixed(b"mixnet/onion-layer-binding/v1")
        + prefixed(vector["chain_id"].encode("utf-8"))
        + struct.pack(">Q", vector["round"])
        + struct.pack(">H", vector["hop"])
    )
    assert manual.hex() == vector["message"]
    tag = hashlib.blake2b(manual, digest_size=16).digest()
    assert tag.hex() == vector["tag"]
    assert tag == binding_tag(
        chain_id=vector["chain_id"], round_id=vector["round"], hop_index=vector["hop"]
    )


ONION_IDS = [f"{o['client']}-{o['index']}" for o in VECTORS["onions"]]


@pytest.mark.parametrize("onion", VECTORS["onions"], ids=ONION_IDS)
def test_onion_layers_are_built_as_specified(onion: dict[str, Any]) -> None:
    """Each layer is libsodium's sealed box made with the given ephemeral secret: E ||
    crypto_box(tag || inner, BLAKE2b-192(E || K), K, e)."""
    assert len(h(onion["payload"])) == WIDTH
    assert onion["onion"] == onion["layers"][0]["sealed"]
    for hop, layer in enumerate(onion["layers"]):
        assert layer["hop"] == hop and layer["recipient"] == MIXES[hop]["name"]
        recipient = h(MIXES[hop]["round_public"])
        assert layer["recipient_public"] == recipient.hex()
        secret = h(layer["ephemeral_secret"])
        ephemeral = bindings.crypto_scalarmult_base(secret)
        assert ephemeral.hex() == layer["ephemeral_public"]
        shared = bindings.crypto_scalarmult(secret, recipient)
        assert shared.hex() == layer["shared_secret"]
        # the recipient computes the same shared secret with its round key
        assert bindings.crypto_scalarmult(h(MIXES[hop]["round_secret"]), ephemeral) == shared
        box_key = bindings.crypto_box_beforenm(recipient, secret)
        assert box_key.hex() == layer["box_key"] == sealed_box_key(shared).hex()
        nonce = hashlib.blake2b(ephemeral + recipient, digest_size=24).digest()
        assert nonce.hex() == layer["nonce"] == sealed_box_nonce(ephemeral, recipient).hex()
        tag = binding_tag(chain_id=CHAIN_ID, round_id=ROUND, hop_index=hop)
        assert tag.hex() == layer["binding_tag"]
        plaintext = tag + inner_of(onion, hop)
        assert plaintext.hex() == layer["plaintext"]
        sealed = ephemeral + bindings.crypto_box(plaintext, nonce, recipient, secret)
        assert sealed.hex() == layer["sealed"]
        assert len(sealed) == onion_length(WIDTH, HOPS - hop)
        # a libsodium sealed box: crypto_box_seal_open opens it
        opened = bindings.crypto_box_seal_open(sealed, recipient, h(MIXES[hop]["round_secret"]))
        assert opened == plaintext


@pytest.mark.parametrize("onion", VECTORS["onions"], ids=ONION_IDS)
def test_onion_peels_hop_by_hop(onion: dict[str, Any]) -> None:
    item = h(onion["onion"])
    for hop in range(HOPS):
        expected = onion_length(WIDTH, HOPS - hop)
        [peeled] = peel_many(
            [item], round_key(hop), chain_id=CHAIN_ID, round_id=ROUND, hop_index=hop,
            expected_length=expected,
        )  # fmt: skip
        assert peeled == inner_of(onion, hop)
        assert isinstance(peeled, bytes)
        item = peeled
    assert item.hex() == onion["payload"]


def test_peeling_refuses_another_hop_round_or_key() -> None:
    onion = onion_vector("alice", 0)
    item = h(onion["layers"][1]["sealed"])
    length = onion_length(WIDTH, HOPS - 1)
    [wrong_hop] = peel_many(
        [item], round_key(1), chain_id=CHAIN_ID, round_id=ROUND, hop_index=2,
        expected_length=length,
    )  # fmt: skip
    assert isinstance(wrong_hop, BindingMismatch)
    [wrong_round] = peel_many(
        [item], round_key(1), chain_id=CHAIN_ID, round_id=ROUND + 1, hop_index=1,
        expected_length=length,
    )  # fmt: skip
    assert isinstance(wrong_round, BindingMismatch)
    [wrong_key] = peel_many(
        [item], round_key(2), chain_id=CHAIN_ID, round_id=ROUND, hop_index=1,
        expected_length=length,
    )  # fmt: skip
    assert isinstance(wrong_key, DecryptionFailed)


def test_wrap_makes_layers_as_specified() -> None:
    """The code's :func:`wrap` (random ephemeral keys) opens with the specification's
    construction alone: sealed box with nonce BLAKE2b-192(E || K), then the binding tag."""
    payload = h(onion_vector("alice", 1)["payload"])
    publics = [h(m["round_public"]) for m in MIXES]
    item = wrap(payload, publics, chain_id=CHAIN_ID, round_id=ROUND)
    assert len(item) == onion_length(WIDTH, HOPS)
    for hop, mix in enumerate(MIXES):
        ephemeral, boxed = item[:32], item[32:]
        secret = h(mix["round_secret"])
        nonce = hashlib.blake2b(ephemeral + publics[hop], digest_size=24).digest()
        plaintext = bindings.crypto_box_open(boxed, nonce, ephemeral, secret)
        assert plaintext[:16] == binding_tag(chain_id=CHAIN_ID, round_id=ROUND, hop_index=hop)
        item = plaintext[16:]
    assert item == payload


def test_onion_digest_and_item_digests() -> None:
    vector = VECTORS["submission"]
    onions = [h(o) for o in vector["onions"]]
    assert onions == [h(onion_vector(vector["client"], i)["onion"]) for i in range(len(onions))]
    manual = hashlib.blake2b(digest_size=32, person=b"mixnet-submit")
    for item in onions:
        manual.update(struct.pack(">I", len(item)) + item)
    assert manual.hexdigest() == vector["onion_digest"]
    assert onion_digest(onions).hex() == vector["onion_digest"]
    assert onion_digest(list(reversed(onions))).hex() != vector["onion_digest"]  # ordered
    for item, digest in zip(onions, vector["item_digests"], strict=True):
        assert hashlib.blake2b(item, digest_size=16).hexdigest() == digest
        assert item_digest(item).hex() == digest


# --------------------------------------------------------------------------- the trace


def trace_validator(payload: bytes) -> bool:
    """cloaknet's payload check, restated: the share width, big-endian, below N."""
    rule = VECTORS["trace"]["validator"]
    return len(payload) == rule["width"] and int.from_bytes(payload, "big") < int(rule["modulus"])


STEP_IDS = [f"hop{s['hop']}" for s in VECTORS["trace"]["steps"]]


@pytest.mark.parametrize("vector", VECTORS["trace"]["steps"], ids=STEP_IDS)
def test_trace_step(vector: dict[str, Any]) -> None:
    hop = vector["hop"]
    item = h(vector["item"])
    accused = VECTORS["trace"]["accused"]
    onion = onion_vector(accused["client"], accused["index"])
    assert item.hex() == onion["layers"][hop]["sealed"]
    assert vector["ephemeral_public"] == item[:32].hex()
    manual = (
        prefixed(b"mixnet/blame-step/v1")
        + prefixed(CHAIN_ID.encode("utf-8"))
        + struct.pack(">QH", ROUND, hop)
        + hashlib.blake2b(item, digest_size=32).digest()
    )
    assert manual.hex() == vector["context"]
    assert step_context(chain_id=CHAIN_ID, round_id=ROUND, hop=hop, item=item) == manual
    secret = bindings.crypto_scalarmult(h(MIXES[hop]["round_secret"]), item[:32])
    assert secret.hex() == vector["shared_secret"]
    public = h(MIXES[hop]["round_public"])
    verify_shared_secret(public, item[:32], secret, h(vector["proof"]), context=manual)
    # the proof is bound to its context and its secret
    with pytest.raises(InvalidProof):
        verify_shared_secret(public, item[:32], secret, h(vector["proof"]), context=manual[:-1])
    tampered = bytearray(h(vector["proof"]))
    tampered[40] ^= 1
    with pytest.raises(InvalidProof):
        verify_shared_secret(public, item[:32], secret, bytes(tampered), context=manual)
    # with the revealed secret anyone opens the layer and sees what it holds
    opened = open_layer(item, secret, public, chain_id=CHAIN_ID, round_id=ROUND, hop=hop)
    assert opened.bound
    assert opened.inner == inner_of(onion, hop)


def test_accusation_verifies() -> None:
    trace = VECTORS["trace"]
    steps = tuple(
        Step(s["hop"], h(s["item"]), h(s["shared_secret"]), h(s["proof"])) for s in trace["steps"]
    )
    accusation = Accusation(Failure(trace["failure"]), steps)
    keys = {m["hop"]: h(m["round_public"]) for m in MIXES}
    payload = h(onion_vector(trace["accused"]["client"], trace["accused"]["index"])["payload"])
    assert not trace_validator(payload)
    verify_accusation(
        accusation, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=HOPS,
        validator=trace_validator,
    )  # fmt: skip
    with pytest.raises(InvalidEvidence):  # a payload the validator accepts is not bad
        verify_accusation(
            accusation, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=HOPS, validator=accept_all
        )
    with pytest.raises(InvalidEvidence):  # the proofs are bound to this round
        verify_accusation(
            accusation, keys, chain_id=CHAIN_ID, round_id=ROUND + 1, mixes=HOPS,
            validator=trace_validator,
        )  # fmt: skip


# --------------------------------------------------------------------------- frames


def limits_for(receiver: str) -> FrameLimits:
    """What ``receiver`` accepts in this chain (a client: what a client checks)."""
    names = [m["name"] for m in MIXES] + [CHAIN["sink"]]
    hop = names.index(receiver) if receiver in names else 0
    length = onion_length(WIDTH, HOPS - hop)
    return FrameLimits(
        chain_id=CHAIN_ID,
        messages=CHAIN["messages"],
        onion_length=length,
        item_length=length,
        chunk_items=4096,
        announcements=HOPS,
        mixes=HOPS,
    )


FRAME_IDS = [f["name"] for f in VECTORS["frames"]]


@pytest.mark.parametrize("vector", VECTORS["frames"], ids=FRAME_IDS)
def test_frame_bytes(vector: dict[str, Any]) -> None:
    fields = from_json(vector["fields"])
    assert "v" not in fields
    data = h(vector["msgpack"])
    assert encode_frame(fields) == data
    decoded = decode_frame(data, max_size=len(data))
    assert decoded == {**fields, "v": WIRE_VERSION}
    kind = vector["parse"]
    limits = limits_for(vector["to"])
    if kind == "request":
        assert to_wire(parse_request(fields["type"], decoded, limits)) == fields
    elif kind == "reply":
        assert to_wire(parse_reply(decoded, limits)) == fields
    elif kind == "authenticate":
        parsed = parse_authenticate(decoded)
        assert (parsed.node, parsed.signature) == (fields["node"], fields["signature"])
    elif kind == "subscribe":
        assert parse_subscribe(decoded).round_id == fields["round"]
    elif kind == "error":
        error = error_from_frame(decoded)
        assert isinstance(error, DuplicateClient)
        assert error.as_pair() == (fields["code"], fields["reason"])
    else:
        assert kind == "none"


def frame(name: str) -> dict[str, Any]:
    for vector in VECTORS["frames"]:
        if vector["name"] == name:
            return dict(from_json(vector["fields"]))
    raise KeyError(name)


def test_the_frames_tell_one_round() -> None:
    """The frame vectors use the other vectors: the offered keys are the signed
    announcements, alice's submission is her onions, the trace is mallory's bad onion."""
    announcements = [
        {
            "node": a["node"], "round": a["round"], "public_key": h(a["public_key"]),
            "signature": h(a["signature"]),
        }
        for a in VECTORS["announcements"]
    ]  # fmt: skip
    offer = frame("round")
    assert offer["announcements"] == announcements
    assert (offer["messages"], offer["payload_length"]) == (CHAIN["messages"], WIDTH)
    assert isinstance(offer["deadline"], float)
    assert frame("round-keys")["announcements"] == announcements[1:]
    assert frame("submit")["onions"] == [h(o) for o in VECTORS["submission"]["onions"]]
    accused = frame("accused")["accusations"][0]
    assert [s["item"] for s in accused["steps"]] == [
        h(s["item"]) for s in VECTORS["trace"]["steps"]
    ]
    mallory = [h(onion_vector("mallory", i)["layers"][1]["sealed"]) for i in range(4)]
    assert frame("exclude")["items"] == mallory
    assert set(frame("batch")["payloads"]) == {
        h(o["layers"][1]["sealed"]) for o in VECTORS["onions"]
    }
    alice = {h(onion_vector("alice", i)["payload"]) for i in range(4)}
    assert set(frame("batch (to the analyzer)")["payloads"]) == alice


def test_every_frame_type_has_a_vector() -> None:
    types = {vector["fields"]["type"] for vector in VECTORS["frames"]}
    assert types >= {
        "get-round", "round", "submit", "accepted", "error", "challenge", "authenticate",
        "authenticated", "open-round", "round-keys", "abort-round", "aborted", "batch",
        "batch-ack", "trace", "accused", "exclude", "excluded", "subscribe", "pending",
        "result",
    }  # fmt: skip
