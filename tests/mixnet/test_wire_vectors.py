"""Known-answer tests of the wire format (``docs/wire.md``, wire version 2).

Every vector in ``wire_vectors.json`` (next to this file) is checked twice where possible:
rebuilt byte by byte from the construction the specification gives (BLAKE2b inputs and
personalisations, length prefixes, X25519 and ChaCha20-Poly1305-IETF with a fixed ephemeral
key, ...), and reproduced or accepted by the code (:mod:`mixnet.onion`, :mod:`mixnet.keys`,
:mod:`mixnet.blame`, :mod:`mixnet.admission`, :mod:`mixnet.frames`, :mod:`mixnet.wire`). A
change to any encoding a peer sees therefore breaks these tests; regenerate the file
deliberately with ``scripts/wire_vectors.py`` (and bump the wire version if peers are
affected). The share encoding and the analyzer's result are checked in
``tests/cloaknet/test_wire_vectors_cloaknet.py`` (this package runs with cloaknet
unimportable).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey

from mixnet.admission import (
    credential_client_id,
    issue_token,
    sign_submission,
    submission_message,
    token_message,
    verify_submission,
    verify_token,
)
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
from mixnet.core.intake import item_digest, submission_digest
from mixnet.dleq import InvalidProof, verify_shared_secret
from mixnet.errors import (
    ERRORS_BY_CODE,
    BadLength,
    BadSignature,
    DecryptionFailed,
    DuplicateClient,
    MixnetError,
    UnsupportedVersion,
)
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
from mixnet.onion import (
    KDF_PERSONAL,
    LAYER_OVERHEAD,
    binding_data,
    layer_key,
    onion_length,
    open_layer_with_secret,
    peel_many,
    submission_length,
    wrap_submission,
)
from mixnet.wire import WIRE_VERSION, decode_frame, encode_frame, error_from_frame

VECTORS_PATH = Path(__file__).with_name("wire_vectors.json")
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CHAIN: dict[str, Any] = VECTORS["chain"]
CHAIN_ID: str = CHAIN["id"]
ROUND: int = CHAIN["round"]
MIXES: list[dict[str, Any]] = CHAIN["mixes"]
HOPS = len(MIXES)
WIDTH: int = CHAIN["payload_length"]
MESSAGES: int = CHAIN["messages"]
SUBMISSIONS: list[dict[str, Any]] = VECTORS["submissions"]
SOLO: dict[str, Any] = VECTORS["one_mix"]


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def prefixed(data: bytes) -> bytes:
    """``u32be(len(data)) || data``, the length prefix of every signed or hashed string."""
    return struct.pack(">I", len(data)) + data


def spec_binding(chain_id: str, round_id: int, hop: int) -> bytes:
    """docs/wire.md § 9.1, restated."""
    return (
        prefixed(b"mixnet/onion-layer/v2")
        + prefixed(chain_id.encode("utf-8"))
        + struct.pack(">Q", round_id)
        + struct.pack(">H", hop)
    )


def spec_kdf(shared: bytes, ephemeral: bytes, recipient: bytes) -> tuple[bytes, bytes]:
    """docs/wire.md § 9.2 step 3, restated: BLAKE2b-352["mixnet-layer-v2"](S || E || K)."""
    okm = hashlib.blake2b(
        shared + ephemeral + recipient, digest_size=44, person=b"mixnet-layer-v2"
    ).digest()
    return okm[:32], okm[32:]


def spec_open(layer: bytes, secret: bytes, chain_id: str, round_id: int, hop: int) -> bytes:
    """docs/wire.md § 9.2, "Opening", restated with libsodium's primitives only."""
    ephemeral = layer[:32]
    shared = bindings.crypto_scalarmult(secret, ephemeral)
    key, nonce = spec_kdf(shared, ephemeral, bindings.crypto_scalarmult_base(secret))
    ad = spec_binding(chain_id, round_id, hop)
    return bytes(bindings.crypto_aead_chacha20poly1305_ietf_decrypt(layer[32:], ad, nonce, key))


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


def submission(client: str) -> dict[str, Any]:
    for vector in SUBMISSIONS:
        if vector["client"] == client:
            return vector
    raise KeyError(client)


def inner_onion(client: str, index: int) -> dict[str, Any]:
    onion: dict[str, Any] = submission(client)["inner_onions"][index]
    assert onion["index"] == index
    return onion


def hop_item(client: str, index: int, hop: int) -> bytes:
    """What mix ``hop >= 1`` receives for the inner onion ``index`` of ``client``."""
    return h(inner_onion(client, index)["layers"][hop - 1]["layer"])


def all_layers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every layer vector with its id and the mix (chain, round, key) it was made for."""
    for vector in SUBMISSIONS:
        yield f"{vector['client']}-box", vector["box_layer"], {}
        for onion in vector["inner_onions"]:
            for layer in onion["layers"]:
                yield f"{vector['client']}-{onion['index']}-hop{layer['hop']}", layer, {}
    solo = {"chain_id": SOLO["chain_id"], "round": SOLO["round"], "mix": SOLO["mix"]}
    yield "solo-box", SOLO["submission"]["box_layer"], solo
    yield "misbound", VECTORS["wrong_binding"]["misbound_layer"], {}


LAYERS = list(all_layers())


def test_the_vectors_are_for_this_wire_version() -> None:
    assert VECTORS["wire_version"] == WIRE_VERSION == 2


def test_lengths() -> None:
    """docs/wire.md § 9.3: onion_length(w, n) = w + 48·n; the box is 48 + m·(w + 48·(L−1))."""
    assert LAYER_OVERHEAD == CHAIN["layer_overhead"] == 48
    box = 48 + MESSAGES * (WIDTH + 48 * (HOPS - 1))
    assert box == CHAIN["submission_length"] == submission_length(WIDTH, HOPS, MESSAGES) == 452
    assert CHAIN["inner_onion_length"] == onion_length(WIDTH, HOPS - 1) == WIDTH + 48 * (HOPS - 1)
    assert CHAIN["item_lengths"] == [box] + [WIDTH + 48 * (HOPS - i) for i in range(1, HOPS + 1)]
    assert CHAIN["item_lengths"] == [452, 101, 53, 5]
    assert SOLO["submission_length"] == submission_length(WIDTH, 1, MESSAGES) == 48 + 4 * WIDTH
    for vector in SUBMISSIONS:
        assert vector["length"] == len(h(vector["box"])) == box
    assert len(h(SOLO["submission"]["box"])) == SOLO["submission_length"]


# --------------------------------------------------------------------------- keys


def test_identity_key_file(tmp_path: Path) -> None:
    vector = VECTORS["key_file"]
    key = SigningKey(h(vector["seed"]))
    path = tmp_path / "mix1.key"
    write_key_file(path, key, name=vector["name"])
    assert path.read_text(encoding="utf-8") == vector["text"]
    assert bytes(read_key_file(path)) == h(vector["seed"])
    assert public_key_text(key.verify_key) == vector["public_key_text"]


@pytest.mark.parametrize("mix", [*MIXES, SOLO["mix"]], ids=[*(m["name"] for m in MIXES), "solo"])
def test_identity_and_round_keys(mix: dict[str, Any]) -> None:
    identity = SigningKey(h(mix["identity_seed"]))
    assert bytes(identity.verify_key).hex() == mix["identity_public"]
    assert bytes(parse_public_key(mix["identity_text"])) == h(mix["identity_public"])
    round_public = bindings.crypto_scalarmult_base(h(mix["round_secret"]))
    assert round_public.hex() == mix["round_public"]
    assert bytes(PrivateKey(h(mix["round_secret"])).public_key) == round_public


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


# --------------------------------------------------------------------------- onion layers


@pytest.mark.parametrize(
    "vector",
    VECTORS["binding_data"],
    ids=[f"{v['chain_id']}-{v['round']}-{v['hop']}" for v in VECTORS["binding_data"]],
)
def test_binding_data(vector: dict[str, Any]) -> None:
    manual = spec_binding(vector["chain_id"], vector["round"], vector["hop"])
    assert manual[:25] == bytes.fromhex("00000015") + b"mixnet/onion-layer/v2"
    assert len(manual) == 39 + len(vector["chain_id"].encode("utf-8"))
    assert manual.hex() == vector["associated_data"]
    assert manual == binding_data(
        chain_id=vector["chain_id"], round_id=vector["round"], hop_index=vector["hop"]
    )


def test_kdf_personalisation() -> None:
    assert KDF_PERSONAL == b"mixnet-layer-v2"


@pytest.mark.parametrize(("name", "layer", "where"), LAYERS, ids=[name for name, _, _ in LAYERS])
def test_layer_is_built_as_specified(
    name: str, layer: dict[str, Any], where: dict[str, Any]
) -> None:
    """E || ChaCha20-Poly1305-IETF(key, nonce, AD, inner) with key || nonce =
    BLAKE2b-352["mixnet-layer-v2"](S || E || K), from the fixed ephemeral secret."""
    chain_id = where.get("chain_id", CHAIN_ID)
    round_id = where.get("round", ROUND)
    mix = where.get("mix") or next(m for m in MIXES if m["name"] == layer["recipient"])
    recipient = h(mix["round_public"])
    assert layer["recipient_public"] == recipient.hex()
    secret = h(layer["ephemeral_secret"])
    ephemeral = bindings.crypto_scalarmult_base(secret)
    assert ephemeral.hex() == layer["ephemeral_public"]
    shared = bindings.crypto_scalarmult(secret, recipient)
    assert shared.hex() == layer["shared_secret"]
    # the recipient computes the same shared secret with its round key
    assert bindings.crypto_scalarmult(h(mix["round_secret"]), ephemeral) == shared
    assert (shared + ephemeral + recipient).hex() == layer["kdf_input"]
    key, nonce = spec_kdf(shared, ephemeral, recipient)
    assert (key.hex(), nonce.hex()) == (layer["key"], layer["nonce"])
    assert layer_key(shared, ephemeral, recipient) == (key, nonce)
    ad = spec_binding(chain_id, round_id, layer["hop"])
    assert ad.hex() == layer["associated_data"]
    inner = h(layer["plaintext"])
    ciphertext = bindings.crypto_aead_chacha20poly1305_ietf_encrypt(inner, ad, nonce, key)
    assert ciphertext.hex() == layer["ciphertext"]
    assert len(ciphertext) == len(inner) + 16
    assert (ephemeral + ciphertext).hex() == layer["layer"]
    assert len(h(layer["layer"])) == len(inner) + LAYER_OVERHEAD
    # anyone with S opens it (the trace); the code agrees
    assert open_layer_with_secret(h(layer["layer"]), recipient, shared, ad) == inner


@pytest.mark.parametrize("vector", SUBMISSIONS, ids=[s["client"] for s in SUBMISSIONS])
def test_submission_box_structure(vector: dict[str, Any]) -> None:
    """§ 9.3: each payload wrapped for hops L−1 … 1, then one layer for hop 0 around the
    concatenated inner onions."""
    payloads = [h(p) for p in vector["payloads"]]
    assert len(payloads) == MESSAGES and all(len(p) == WIDTH for p in payloads)
    onions = vector["inner_onions"]
    assert [o["index"] for o in onions] == list(range(MESSAGES))
    for onion, payload in zip(onions, payloads, strict=True):
        assert h(onion["payload"]) == payload
        layers = onion["layers"]
        assert [layer["hop"] for layer in layers] == list(range(1, HOPS))
        assert [layer["recipient"] for layer in layers] == [m["name"] for m in MIXES[1:]]
        assert onion["onion"] == layers[0]["layer"]
        for outer, inner in itertools.pairwise(layers):
            assert outer["plaintext"] == inner["layer"]
        assert layers[-1]["plaintext"] == payload.hex()
        assert len(h(onion["onion"])) == onion_length(WIDTH, HOPS - 1)
    box_layer = vector["box_layer"]
    assert (box_layer["hop"], box_layer["recipient"]) == (0, MIXES[0]["name"])
    assert box_layer["plaintext"] == "".join(o["onion"] for o in onions)
    assert box_layer["layer"] == vector["box"]
    assert vector["items"] == [o["onion"] for o in onions]
    # every layer has its own ephemeral key
    ephemerals = [box_layer["ephemeral_public"]] + [
        layer["ephemeral_public"] for o in onions for layer in o["layers"]
    ]
    assert len(set(ephemerals)) == 1 + MESSAGES * (HOPS - 1)


@pytest.mark.parametrize("vector", SUBMISSIONS, ids=[s["client"] for s in SUBMISSIONS])
def test_entry_mix_opens_the_box_and_cuts_it(vector: dict[str, Any]) -> None:
    box = h(vector["box"])
    items = peel_many(
        [box], round_key(0), chain_id=CHAIN_ID, round_id=ROUND, hop_index=0,
        expected_length=len(box), split=MESSAGES,
    )  # fmt: skip
    assert items == [h(i) for i in vector["items"]]
    plaintext = spec_open(box, h(MIXES[0]["round_secret"]), CHAIN_ID, ROUND, 0)
    width = onion_length(WIDTH, HOPS - 1)
    assert [plaintext[i : i + width] for i in range(0, len(plaintext), width)] == items


@pytest.mark.parametrize("vector", SUBMISSIONS, ids=[s["client"] for s in SUBMISSIONS])
def test_items_peel_hop_by_hop(vector: dict[str, Any]) -> None:
    for onion in vector["inner_onions"]:
        item = h(onion["onion"])
        for hop in range(1, HOPS):
            [peeled] = peel_many(
                [item], round_key(hop), chain_id=CHAIN_ID, round_id=ROUND, hop_index=hop,
                expected_length=onion_length(WIDTH, HOPS - hop),
            )  # fmt: skip
            assert isinstance(peeled, bytes)
            assert peeled == spec_open(item, h(MIXES[hop]["round_secret"]), CHAIN_ID, ROUND, hop)
            item = peeled
        assert item.hex() == onion["payload"]


def test_one_mix_box_holds_the_payloads() -> None:
    vector = SOLO["submission"]
    box = h(vector["box"])
    assert vector["box_layer"]["layer"] == vector["box"]
    assert vector["box_layer"]["plaintext"] == "".join(vector["payloads"])
    assert vector["items"] == vector["payloads"]
    assert "inner_onions" not in vector
    items = peel_many(
        [box], PrivateKey(h(SOLO["mix"]["round_secret"])), chain_id=SOLO["chain_id"],
        round_id=SOLO["round"], hop_index=0, expected_length=SOLO["submission_length"],
        split=SOLO["messages"],
    )  # fmt: skip
    assert items == [h(p) for p in vector["payloads"]]
    assert submission_digest(box).hex() == vector["submission_digest"]


OPENINGS: list[dict[str, Any]] = VECTORS["wrong_binding"]["openings"]


@pytest.mark.parametrize(
    "case",
    OPENINGS,
    ids=[f"{c['item']}-{c['key_of']}-{c['chain_id']}-{c['round']}-{c['hop']}" for c in OPENINGS],
)
def test_openings(case: dict[str, Any]) -> None:
    """A layer opens only with the key and the binding it was made for: any other chain,
    round or hop fails exactly like another key (decryption-failed)."""
    mix = next(m for m in MIXES if m["name"] == case["key_of"])
    layer = h(case["layer"])
    ad = spec_binding(case["chain_id"], case["round"], case["hop"])
    assert ad.hex() == case["associated_data"]
    [result] = peel_many(
        [layer], PrivateKey(h(mix["round_secret"])), chain_id=case["chain_id"],
        round_id=case["round"], hop_index=case["hop"], expected_length=len(layer),
    )  # fmt: skip
    if case["result"] == "ok":
        assert result == h(case["inner"])
        assert spec_open(
            layer, h(mix["round_secret"]), case["chain_id"], case["round"], case["hop"]
        ) == h(case["inner"])
        return
    assert case["result"] == DecryptionFailed.code == "decryption-failed"
    assert isinstance(result, DecryptionFailed)
    with pytest.raises(CryptoError):
        spec_open(layer, h(mix["round_secret"]), case["chain_id"], case["round"], case["hop"])


def test_wrong_binding_cases_are_covered() -> None:
    failed = [c for c in OPENINGS if c["result"] == "decryption-failed"]
    assert {c["item"] for c in failed} >= {"alice-1", "misbound", "alice-box"}
    correct = [c for c in failed if c["item"] == "alice-1"]
    assert {(c["chain_id"] != CHAIN_ID, c["round"] != ROUND, c["hop"] != 1) for c in correct} >= {
        (True, False, False), (False, True, False), (False, False, True),
    }  # fmt: skip
    misbound = VECTORS["wrong_binding"]["misbound_layer"]
    assert (misbound["recipient"], misbound["hop"]) == ("mix2", 2)
    assert "binding-mismatch" not in ERRORS_BY_CODE


def test_wrong_round_chain_hop_and_key_raise_decryption_failed() -> None:
    """The code's view: peel_many reports, open_layer raises, DecryptionFailed for every
    wrong binding of a correctly made hop-1 item."""
    item = hop_item("alice", 0, 1)
    length = onion_length(WIDTH, HOPS - 1)
    for key, chain_id, round_id, hop in (
        (round_key(1), CHAIN_ID, ROUND + 1, 1),
        (round_key(1), "vectors2", ROUND, 1),
        (round_key(1), CHAIN_ID, ROUND, 2),
        (round_key(1), CHAIN_ID, ROUND, 0),
        (round_key(2), CHAIN_ID, ROUND, 1),
    ):
        [result] = peel_many(
            [item], key, chain_id=chain_id, round_id=round_id, hop_index=hop,
            expected_length=length,
        )  # fmt: skip
        assert isinstance(result, DecryptionFailed), (chain_id, round_id, hop)
    shared = bindings.crypto_scalarmult(h(MIXES[1]["round_secret"]), item[:32])
    public = h(MIXES[1]["round_public"])
    assert open_layer(item, shared, public, chain_id=CHAIN_ID, round_id=ROUND, hop=1) == h(
        inner_onion("alice", 0)["layers"][0]["plaintext"]
    )
    for chain_id, round_id, hop in (
        (CHAIN_ID, ROUND + 1, 1),
        ("x", ROUND, 1),
        (CHAIN_ID, ROUND, 2),
    ):
        with pytest.raises(DecryptionFailed):
            open_layer(item, shared, public, chain_id=chain_id, round_id=round_id, hop=hop)
    # a tampered box and a box of the wrong length
    box = bytearray(h(submission("alice")["box"]))
    box[100] ^= 1
    [tampered, *_] = peel_many(
        [bytes(box)], round_key(0), chain_id=CHAIN_ID, round_id=ROUND, hop_index=0,
        expected_length=len(box), split=MESSAGES,
    )  # fmt: skip
    assert isinstance(tampered, DecryptionFailed)
    [short, *_] = peel_many(
        [bytes(box[:-1])], round_key(0), chain_id=CHAIN_ID, round_id=ROUND, hop_index=0,
        expected_length=len(box), split=MESSAGES,
    )  # fmt: skip
    assert isinstance(short, BadLength)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_wrap_submission_makes_boxes_as_specified(hops: int) -> None:
    """The code's :func:`wrap_submission` (random ephemeral keys) opens with the
    specification's construction alone, and the items peel down to the payloads."""
    payloads = [h(p) for p in submission("alice")["payloads"]]
    secrets = [h(m["round_secret"]) for m in MIXES[:hops]]
    publics = [h(m["round_public"]) for m in MIXES[:hops]]
    box = wrap_submission(payloads, publics, chain_id=CHAIN_ID, round_id=ROUND)
    assert len(box) == submission_length(WIDTH, hops, MESSAGES)
    assert len(box) == 48 + MESSAGES * (WIDTH + 48 * (hops - 1))
    plaintext = spec_open(box, secrets[0], CHAIN_ID, ROUND, 0)
    width = WIDTH + 48 * (hops - 1)
    items = [plaintext[i : i + width] for i in range(0, len(plaintext), width)]
    assert len(items) == MESSAGES
    for item, payload in zip(items, payloads, strict=True):
        for hop in range(1, hops):
            item = spec_open(item, secrets[hop], CHAIN_ID, ROUND, hop)
        assert item == payload
    with pytest.raises(CryptoError):  # bound to hop 0 of this round
        spec_open(box, secrets[0], CHAIN_ID, ROUND + 1, 0)


def test_submission_digests_and_item_digests() -> None:
    for vector in [*SUBMISSIONS, SOLO["submission"]]:
        box = h(vector["box"])
        manual = hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").digest()
        assert manual.hex() == vector["submission_digest"]
        assert submission_digest(box) == manual
    for vector in SUBMISSIONS:
        for item, digest in zip(vector["items"], vector["item_digests"], strict=True):
            assert hashlib.blake2b(h(item), digest_size=16).hexdigest() == digest
            assert item_digest(h(item)).hex() == digest


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
    assert item == hop_item(accused["client"], accused["index"], hop)
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
    # with the revealed secret anyone opens the layer: KDF, then the AEAD with the binding
    key, nonce = spec_kdf(secret, item[:32], public)
    assert (key.hex(), nonce.hex()) == (vector["key"], vector["nonce"])
    ad = spec_binding(CHAIN_ID, ROUND, hop)
    assert ad.hex() == vector["associated_data"]
    inner = bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[32:], ad, nonce, key)
    assert inner.hex() == vector["inner"]
    assert open_layer(item, secret, public, chain_id=CHAIN_ID, round_id=ROUND, hop=hop) == inner
    expected = h(inner_onion(accused["client"], accused["index"])["layers"][hop - 1]["plaintext"])
    assert inner == expected
    with pytest.raises(DecryptionFailed):  # the opening is bound to the hop too
        open_layer(item, secret, public, chain_id=CHAIN_ID, round_id=ROUND, hop=hop - 1)


def test_accusation_verifies() -> None:
    trace = VECTORS["trace"]
    assert trace["failure"] == Failure.INVALID_PAYLOAD.value == "invalid-payload"
    assert "invalid-payload" in [f.value for f in Failure]
    steps = tuple(
        Step(s["hop"], h(s["item"]), h(s["shared_secret"]), h(s["proof"])) for s in trace["steps"]
    )
    assert steps[0].hop == 1 and steps[-1].hop == HOPS - 1
    assert trace["steps"][0]["inner"] == trace["steps"][1]["item"]
    accusation = Accusation(Failure(trace["failure"]), steps)
    keys = {m["hop"]: h(m["round_public"]) for m in MIXES}
    payload = h(inner_onion(trace["accused"]["client"], trace["accused"]["index"])["payload"])
    assert payload.hex() == trace["steps"][-1]["inner"]
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


# --------------------------------------------------------------------------- admission


def test_admission_token_and_signature() -> None:
    vector = VECTORS["admission"]
    client = SigningKey(h(vector["client_seed"]))
    issuer = SigningKey(h(vector["issuer_seed"]))
    credential = bytes(client.verify_key)
    assert credential.hex() == vector["credential"]
    assert bytes(issuer.verify_key).hex() == vector["issuer_public"]
    assert (
        vector["client"] == credential_client_id(credential) == public_key_text(client.verify_key)
    )
    chain_id, round_id, expires = vector["chain_id"], vector["round"], vector["expires"]
    token_signed = (
        prefixed(b"mixnet/admission-token/v1")
        + prefixed(chain_id.encode("utf-8"))
        + prefixed(credential)
        + struct.pack(">Q", expires)
    )
    assert token_signed.hex() == vector["token_signed_bytes"]
    assert token_message(chain_id, credential, expires) == token_signed
    token = issuer.sign(token_signed).signature + struct.pack(">Q", expires)
    assert token.hex() == vector["token"]
    assert issue_token(issuer, chain_id=chain_id, credential=credential, expires=expires) == token
    verify_token(issuer.verify_key, token, chain_id=chain_id, credential=credential, now=0.0)
    box = h(vector["box"])
    assert vector["box"] == submission("alice")["box"]
    digest = hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").digest()
    assert digest.hex() == vector["submission_digest"]
    signed = (
        prefixed(b"mixnet/submission/v1")
        + prefixed(chain_id.encode("utf-8"))
        + struct.pack(">Q", round_id)
        + prefixed(digest)
    )
    assert signed.hex() == vector["submission_signed_bytes"]
    assert submission_message(chain_id, round_id, digest) == signed
    signature = client.sign(signed).signature
    assert signature.hex() == vector["signature"]
    assert sign_submission(client, chain_id=chain_id, round_id=round_id, digest=digest) == signature
    verify_submission(credential, signature, chain_id=chain_id, round_id=round_id, digest=digest)
    other = submission_digest(h(submission("mallory")["box"]))
    with pytest.raises(BadSignature):  # the signature covers the box
        verify_submission(credential, signature, chain_id=chain_id, round_id=round_id, digest=other)


# --------------------------------------------------------------------------- frames


def limits_for(receiver: str) -> FrameLimits:
    """What ``receiver`` accepts in this chain (a client: what a client checks)."""
    names = [m["name"] for m in MIXES] + [CHAIN["sink"]]
    hop = names.index(receiver) if receiver in names else 0
    length = CHAIN["item_lengths"][hop]
    return FrameLimits(
        chain_id=CHAIN_ID,
        submission_length=CHAIN["submission_length"],
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


def test_a_version_1_frame_is_refused() -> None:
    """§ 5.1: a version 1 peer's frame (here a v1 ``submit`` with ``onions``) is refused with
    ``unsupported-version`` before its fields are looked at."""
    fields = frame("submit")
    v1 = {"type": "submit", "round": ROUND, "client": "alice",
          "onions": [h(i) for i in submission("alice")["items"]], "v": 1}  # fmt: skip
    data = msgpack.packb(v1, use_bin_type=True)
    with pytest.raises(UnsupportedVersion) as caught:
        decode_frame(data, max_size=len(data))
    assert caught.value.code == "unsupported-version"
    assert set(fields) == {"type", "round", "client", "box"}


def test_a_box_of_the_wrong_length_is_refused() -> None:
    fields = frame("submit")
    fields["box"] = fields["box"][:-1]
    decoded = decode_frame(encode_frame(fields), max_size=1 << 20)
    with pytest.raises(BadLength):
        parse_request("submit", decoded, limits_for(MIXES[0]["name"]))


def test_the_frames_tell_one_round() -> None:
    """The frame vectors use the other vectors: the offered keys are the signed
    announcements, alice's submission is her box, the trace is mallory's bad onion."""
    announcements = [
        {
            "node": a["node"], "round": a["round"], "public_key": h(a["public_key"]),
            "signature": h(a["signature"]),
        }
        for a in VECTORS["announcements"]
    ]  # fmt: skip
    offer = frame("round")
    assert offer["announcements"] == announcements
    assert (offer["messages"], offer["payload_length"]) == (MESSAGES, WIDTH)
    assert isinstance(offer["deadline"], float)
    assert frame("round-keys")["announcements"] == announcements[1:]
    assert frame("submit")["box"] == h(submission("alice")["box"])
    admitted = frame("submit (with admission)")
    vector = VECTORS["admission"]
    assert admitted["box"] == h(vector["box"])
    assert admitted["client"] == vector["client"]
    assert (admitted["credential"], admitted["token"], admitted["signature"]) == (
        h(vector["credential"]), h(vector["token"]), h(vector["signature"]),
    )  # fmt: skip
    accused = frame("accused")["accusations"][0]
    assert [s["item"] for s in accused["steps"]] == [
        h(s["item"]) for s in VECTORS["trace"]["steps"]
    ]
    assert frame("exclude")["items"] == [h(i) for i in submission("mallory")["items"]]
    assert sorted(frame("batch")["payloads"]) == sorted(
        h(i) for vector in SUBMISSIONS for i in vector["items"]
    )
    alice = {h(p) for p in submission("alice")["payloads"]}
    assert set(frame("batch (to the analyzer)")["payloads"]) == alice


def test_every_frame_type_has_a_vector() -> None:
    types = {vector["fields"]["type"] for vector in VECTORS["frames"]}
    assert types >= {
        "get-round", "round", "submit", "accepted", "error", "challenge", "authenticate",
        "authenticated", "open-round", "round-keys", "abort-round", "aborted", "batch",
        "batch-ack", "trace", "accused", "exclude", "excluded", "subscribe", "pending",
        "result",
    }  # fmt: skip


def test_error_codes_of_version_2() -> None:
    """§ 7: decryption-failed covers a wrong binding; binding-mismatch is gone."""
    assert ERRORS_BY_CODE["decryption-failed"] is DecryptionFailed
    assert "binding-mismatch" not in ERRORS_BY_CODE
    assert issubclass(DecryptionFailed, MixnetError)
