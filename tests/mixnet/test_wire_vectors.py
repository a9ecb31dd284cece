"""Known-answer tests of the wire format (``docs/wire.md``, wire version 2).

Every vector in ``wire_vectors.json`` (next to this file) is checked twice where possible:
rebuilt byte by byte from the construction the specification gives (BLAKE2b inputs and
personalisations, length prefixes, X25519 and ChaCha20-Poly1305-IETF with a fixed ephemeral
key, ...), and reproduced or accepted by the code (:mod:`mixnet.onion`, :mod:`mixnet.keys`,
:mod:`mixnet.blame`, :mod:`mixnet.admission`, :mod:`mixnet.frames`, :mod:`mixnet.wire`). A
change to any encoding a peer sees therefore breaks these tests; regenerate the file
deliberately with ``scripts/wire_vectors.py`` (and bump the wire version if peers are
affected). The ``proven`` section (a chain with ownership proofs, § 9.5, § 9.6) is rebuilt
from the fixed ephemeral secrets and proof nonces, and :mod:`mixnet.ownership` is run with
those bytes in place of ``os.urandom`` to check that it makes the same proofs. The
``signed_chunks`` section (§ 8.5, § 13.3, § 13.4) is rebuilt with ``hashlib`` and PyNaCl alone
— the Merkle trees (the audit paths checked with RFC 9162's algorithm as well), the signed
bytes, Ed25519 signatures and deliveries — and checked against :mod:`mixnet.chunk_signature`,
:mod:`mixnet.accusation_wire`, :mod:`mixnet.frames` and the judge of a blame
(:func:`mixnet.core.deliveries.judge`). The share encoding and the analyzer's result are
checked in ``tests/cloaknet/test_wire_vectors_cloaknet.py`` (this package runs with cloaknet
unimportable).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from nacl import bindings
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey

from mixnet import ownership as ownership_module
from mixnet.accusation_wire import accusation_to_wire, parse_accusations, parse_page_proof
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
    delivered_by,
    failure_of,
    open_layer,
    owned,
    prove_failure,
    step_context,
    verify_accusation,
    verify_accusations,
)
from mixnet.chunk_signature import (
    MAX_PATH,
    SIGNATURE_LENGTH,
    Delivery,
    chunk_message,
    chunk_root,
    inclusion_path,
    leaf_hash,
    path_root,
    sign_chunk,
    verify_chunk,
    verify_delivery,
)
from mixnet.core.deliveries import ChunkSigning, judge
from mixnet.core.intake import item_digest, submission_digest
from mixnet.dleq import InvalidProof, verify_shared_secret
from mixnet.errors import (
    ERRORS_BY_CODE,
    BadLength,
    BadSignature,
    DecryptionFailed,
    DuplicateClient,
    MalformedFrame,
    MixnetError,
    UnsupportedVersion,
)
from mixnet.frames import (
    Accused,
    Batch,
    Exclude,
    FrameLimits,
    Submit,
    Trace,
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
    PROVEN_LAYER_OVERHEAD,
    binding_data,
    layer_key,
    layer_overhead,
    onion_length,
    open_layer_with_secret,
    peel_many,
    split_layer,
    submission_length,
    wrap,
    wrap_submission,
)
from mixnet.ownership import PERSONAL as OWNERSHIP_PERSONAL
from mixnet.ownership import PROOF_LENGTH as OWNERSHIP_PROOF_LENGTH
from mixnet.ownership import (
    ciphertext_digest,
    new_ephemeral,
    prove_ownership,
    verify_ownership,
)
from mixnet.submit_many import parse_receipts, parse_submit_many, submit_many_frame
from mixnet.trace_signature import accusation_bytes, verify_refusal
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
    assert OWNERSHIP_PERSONAL == b"mixnet-owner-v2"  # docs/wire.md § 9.6


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


def test_duplicate_accusations_hold_only_in_pairs() -> None:
    """§ 13.3: two mix-2 layers around one mix-3 onion; each step reveals its layer's
    secret, both layers hold the same onion, and the two accusations hold together only."""
    dup = VECTORS["duplicates"]
    assert dup["failure"] == Failure.DUPLICATE.value == "duplicate"
    keys = {m["hop"]: h(m["round_public"]) for m in MIXES}
    accusations = [
        Accusation(Failure.DUPLICATE,
                   (Step(s["hop"], h(s["item"]), h(s["shared_secret"]), h(s["proof"])),))
        for s in dup["steps"]
    ]  # fmt: skip
    assert [s["inner"] for s in dup["steps"]] == [dup["onion"]] * 2
    assert [s["item"] for s in dup["steps"]] == [layer["layer"] for layer in dup["layers"]]
    assert all(s["hop"] == 1 for s in dup["steps"])

    def check(accs: list[Accusation]) -> list[bool]:
        return verify_accusations(
            accs, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=HOPS, validator=accept_all
        )

    assert check(accusations) == [True, True]
    assert check(accusations[:1]) == [False]
    assert check([accusations[0], accusations[0]]) == [False, False]


# --------------------------------------------------------------------------- ownership proofs

PROVEN: dict[str, Any] = VECTORS["proven"]
P_CHAIN_ID: str = PROVEN["chain_id"]
P_ROUND: int = PROVEN["round"]
P_MIXES: list[dict[str, Any]] = PROVEN["mixes"]
P_SUBMISSIONS: list[dict[str, Any]] = PROVEN["submissions"]
FIELD_PRIME = 2**255 - 19
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493


def le(value: int) -> bytes:
    return value.to_bytes(32, "little")


def spec_lift_0(public: bytes) -> bytes:
    """docs/wire.md § 13.2: the Edwards point over ``u`` with sign bit 0."""
    u = int.from_bytes(public, "little")
    return le((u - 1) * pow(u + 1, -1, FIELD_PRIME) % FIELD_PRIME)


def spec_owner_challenge(context: bytes, public: bytes, commitment: bytes, digest: bytes) -> bytes:
    """docs/wire.md § 9.6: ``BLAKE2b-128["mixnet-owner-v2"](u32be(len ctx) || ctx || E || R
    || h)``."""
    message = prefixed(context) + public + commitment + digest
    return hashlib.blake2b(message, digest_size=16, person=b"mixnet-owner-v2").digest()


def spec_verify_ownership(public: bytes, proof: bytes, digest: bytes, context: bytes) -> bool:
    """docs/wire.md § 9.6 "Verification", restated."""
    if len(public) != 32 or len(proof) != 48 or len(digest) != 32:
        return False
    c, s = proof[:16], int.from_bytes(proof[16:], "little")
    if not any(c) or not 0 < s < GROUP_ORDER:
        return False
    if int.from_bytes(public, "little") >= FIELD_PRIME - 1:
        return False
    point = spec_lift_0(public)
    if not bindings.crypto_core_ed25519_is_valid_point(point):
        return False
    commitment = bindings.crypto_core_ed25519_sub(
        bindings.crypto_scalarmult_ed25519_base_noclamp(le(s)),
        bindings.crypto_scalarmult_ed25519_noclamp(c + bytes(16), point),
    )
    return spec_owner_challenge(context, public, commitment, digest) == c


def owned_by_spec(item: bytes, hop: int) -> bool:
    """§ 13.3 item 6: the ownership proof of an item at ``hop``."""
    if len(item) < 96:
        return False
    return spec_verify_ownership(
        item[:32], item[32:80], hashlib.blake2b(item[80:], digest_size=32).digest(),
        spec_binding(P_CHAIN_ID, P_ROUND, hop),
    )  # fmt: skip


def p_round_key(hop: int) -> PrivateKey:
    return PrivateKey(h(P_MIXES[hop]["round_secret"]))


def p_submission(client: str) -> dict[str, Any]:
    for vector in P_SUBMISSIONS:
        if vector["client"] == client:
            return vector
    raise KeyError(client)


def proven_layers() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every layer with an ownership proof in the ``proven`` section."""
    for vector in P_SUBMISSIONS:
        for onion in vector["inner_onions"]:
            for layer in onion["layers"]:
                yield f"{vector['client']}-{onion['index']}-hop{layer['hop']}", layer
            if "garbage_layer" in onion:
                yield f"{vector['client']}-{onion['index']}-garbage", onion["garbage_layer"]


PROVEN_LAYERS = list(proven_layers())


def fixed_randomness(monkeypatch: pytest.MonkeyPatch, *chunks: bytes) -> list[bytes]:
    """Make :mod:`mixnet.ownership` draw ``chunks`` in order instead of ``os.urandom``."""
    queue = list(chunks)

    def urandom(size: int) -> bytes:
        chunk = queue.pop(0)
        assert len(chunk) == size
        return chunk

    monkeypatch.setattr(ownership_module, "os", SimpleNamespace(urandom=urandom))
    return queue


def test_proven_lengths() -> None:
    """§ 9.5: 96 bytes per inner layer; the box layer stays 48."""
    assert PROVEN["ownership_proofs"] is True
    assert PROVEN["proof_length"] == OWNERSHIP_PROOF_LENGTH == 48
    assert PROVEN["proven_layer_overhead"] == PROVEN_LAYER_OVERHEAD == 96
    assert PROVEN["layer_overhead"] == LAYER_OVERHEAD == 48
    width, messages, hops = PROVEN["payload_length"], PROVEN["messages"], len(P_MIXES)
    box = 48 + messages * (width + 96 * (hops - 1))
    assert box == PROVEN["submission_length"] == 836
    assert box == submission_length(width, hops, messages, proven=True)
    assert PROVEN["inner_onion_length"] == onion_length(width, hops - 1, proven=True) == 197
    assert PROVEN["item_lengths"] == [box] + [width + 96 * (hops - i) for i in range(1, hops + 1)]
    assert PROVEN["item_lengths"] == [836, 197, 101, 5]
    assert layer_overhead(True) == 96 and layer_overhead(False) == 48
    assert submission_length(width, 1, messages, proven=True) == submission_length(
        width, 1, messages
    )  # one mix: no inner layers, nothing changes
    for vector in P_SUBMISSIONS:
        assert vector["length"] == len(h(vector["box"])) == box


@pytest.mark.parametrize(("name", "layer"), PROVEN_LAYERS, ids=[n for n, _ in PROVEN_LAYERS])
def test_proven_layer_is_built_as_specified(
    name: str, layer: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """§ 9.5 and § 9.6 step by step from the fixed ``e`` and nonce bytes; the code makes
    the same key and proof from the same random bytes, and verifies it."""
    hop = layer["hop"]
    mix = P_MIXES[hop]
    assert hop >= 1 and mix["name"] == layer["recipient"]
    recipient = h(mix["round_public"])
    assert layer["recipient_public"] == recipient.hex()
    # Key: clamp, reduce, P0 = x0·B, E = u(P0), the witness sign choice
    e = h(layer["ephemeral_secret"])
    clamped = bytearray(e)
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    assert bytes(clamped).hex() == layer["clamped_secret"]
    x0 = int.from_bytes(clamped, "little") % GROUP_ORDER
    assert le(x0).hex() == layer["scalar"]
    point = bindings.crypto_scalarmult_ed25519_base_noclamp(le(x0))
    assert point.hex() == layer["scalar_point"]
    sign = point[31] >> 7
    assert sign == layer["sign_bit"]
    y = int.from_bytes(point, "little") & ((1 << 255) - 1)
    public = le((1 + y) * pow(1 - y, -1, FIELD_PRIME) % FIELD_PRIME)
    assert public.hex() == layer["ephemeral_public"]
    assert bindings.crypto_scalarmult_base(e) == public  # E = X25519(e, 9)
    witness = x0 if sign == 0 else GROUP_ORDER - x0
    assert le(witness).hex() == layer["witness"]
    assert spec_lift_0(public).hex() == layer["lifted_public"]
    assert bindings.crypto_scalarmult_ed25519_base_noclamp(le(witness)) == spec_lift_0(public)
    # the layer's AEAD, as § 9.2 (a garbage layer's ciphertext opens under no key)
    ad = spec_binding(P_CHAIN_ID, P_ROUND, hop)
    assert ad.hex() == layer["associated_data"]
    ciphertext = h(layer["ciphertext"])
    if "plaintext" in layer:
        shared = bindings.crypto_scalarmult(e, recipient)
        assert shared.hex() == layer["shared_secret"]
        assert (shared + public + recipient).hex() == layer["kdf_input"]
        key, nonce = spec_kdf(shared, public, recipient)
        assert (key.hex(), nonce.hex()) == (layer["key"], layer["nonce"])
        inner = h(layer["plaintext"])
        assert bindings.crypto_aead_chacha20poly1305_ietf_encrypt(inner, ad, nonce, key) == (
            ciphertext
        )
    # Proof: h, r from the 64 bytes, R = r·B, c = H(ctx, E, R, h), s = r + c·x mod ℓ
    digest = hashlib.blake2b(ciphertext, digest_size=32).digest()
    assert digest.hex() == layer["ciphertext_digest"] and digest == ciphertext_digest(ciphertext)
    random_bytes = h(layer["proof_random"])
    r = int.from_bytes(random_bytes, "little") % GROUP_ORDER
    assert le(r).hex() == layer["r"]
    commitment = bindings.crypto_scalarmult_ed25519_base_noclamp(le(r))
    assert commitment.hex() == layer["commitment"]
    message = prefixed(ad) + public + commitment + digest
    assert message.hex() == layer["challenge_input"]
    assert len(message) == 4 + len(ad) + 96
    c = spec_owner_challenge(ad, public, commitment, digest)
    assert c.hex() == layer["challenge"]
    s = (r + int.from_bytes(c, "little") * witness) % GROUP_ORDER
    assert le(s).hex() == layer["response"]
    proof = c + le(s)
    assert proof.hex() == layer["proof"]
    assert (public + proof + ciphertext).hex() == layer["layer"]
    assert split_layer(h(layer["layer"]), proven=True) == (public, proof, ciphertext)
    # verification: the spec and the code agree; the proof is bound to h, ctx and E
    assert spec_verify_ownership(public, proof, digest, ad)
    assert verify_ownership(public, proof, digest, ad)
    assert owned(h(layer["layer"]), chain_id=P_CHAIN_ID, round_id=P_ROUND, hop=hop)
    other_hop = spec_binding(P_CHAIN_ID, P_ROUND, hop + 1)
    for args in (
        (public, proof, ciphertext_digest(ciphertext[:-1]), ad),
        (public, proof, digest, other_hop),
        (public, proof[:16] + le(s ^ 1), digest, ad),
        (public, bytes(16) + proof[16:], digest, ad),
        (bindings.crypto_scalarmult_base(fixed_secret("other")), proof, digest, ad),
    ):
        assert not verify_ownership(*args)
        assert not spec_verify_ownership(*args)
    # the code draws e, then the 64 nonce bytes: the same key and the same proof
    left = fixed_randomness(monkeypatch, e, random_bytes)
    made = new_ephemeral()
    assert (made.secret, made.public, made.witness) == (e, public, le(witness))
    assert prove_ownership(made, digest, ad) == proof
    assert not left


def fixed_secret(label: str) -> bytes:
    return hashlib.blake2b(label.encode(), digest_size=32).digest()


def test_proven_vectors_show_both_witness_choices() -> None:
    assert {layer["sign_bit"] for _, layer in PROVEN_LAYERS} == {0, 1}


def test_code_wraps_the_proven_onions(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`mixnet.onion.wrap` with ``proven=True``, given the vectors' random bytes
    (innermost layer first: ``e`` then the nonce bytes), makes dave's inner onions."""
    keys = [h(m["round_public"]) for m in P_MIXES]
    for onion in p_submission("dave")["inner_onions"]:
        draws = [
            chunk
            for layer in reversed(onion["layers"])
            for chunk in (h(layer["ephemeral_secret"]), h(layer["proof_random"]))
        ]
        left = fixed_randomness(monkeypatch, *draws)
        made = wrap(
            h(onion["payload"]), keys[1:], chain_id=P_CHAIN_ID, round_id=P_ROUND, first_hop=1,
            proven=True,
        )  # fmt: skip
        assert made.hex() == onion["onion"]
        assert not left


@pytest.mark.parametrize("vector", P_SUBMISSIONS, ids=[s["client"] for s in P_SUBMISSIONS])
def test_proven_box_structure_and_peeling(vector: dict[str, Any]) -> None:
    """§ 9.5: an ordinary entry layer around the proven inner onions; each mix skips the
    proof when it peels."""
    box = h(vector["box"])
    box_layer = vector["box_layer"]
    assert (box_layer["hop"], box_layer["layer"]) == (0, vector["box"])
    assert "proof" not in box_layer  # the entry layer is never proven
    assert box_layer["plaintext"] == "".join(o["onion"] for o in vector["inner_onions"])
    digest = hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").hexdigest()
    assert digest == vector["submission_digest"]
    opened = peel_many(
        [box], p_round_key(0), chain_id=P_CHAIN_ID, round_id=P_ROUND, hop_index=0,
        expected_length=PROVEN["submission_length"], split=PROVEN["messages"],
    )  # fmt: skip
    items = [h(i) for i in vector["items"]]
    assert opened == items
    plaintext = spec_open(box, h(P_MIXES[0]["round_secret"]), P_CHAIN_ID, P_ROUND, 0)
    assert plaintext == b"".join(items)
    assert [item_digest(i).hex() for i in items] == vector["item_digests"]
    for onion, item in zip(vector["inner_onions"], items, strict=True):
        assert item.hex() == onion["onion"]
        for layer in onion["layers"]:
            hop = layer["hop"]
            assert item.hex() == layer["layer"]
            [peeled] = peel_many(
                [item], p_round_key(hop), chain_id=P_CHAIN_ID, round_id=P_ROUND,
                hop_index=hop, expected_length=PROVEN["item_lengths"][hop], proven=True,
            )  # fmt: skip
            assert isinstance(peeled, bytes)
            # the spec's opening: skip E's proof, decrypt y[80:]
            shared = bindings.crypto_scalarmult(h(P_MIXES[hop]["round_secret"]), item[:32])
            key, nonce = spec_kdf(shared, item[:32], h(P_MIXES[hop]["round_public"]))
            ad = spec_binding(P_CHAIN_ID, P_ROUND, hop)
            assert peeled == bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
                item[80:], ad, nonce, key
            )
            assert peeled.hex() == layer["plaintext"]
            [unproven] = peel_many(
                [item], p_round_key(hop), chain_id=P_CHAIN_ID, round_id=P_ROUND,
                hop_index=hop, expected_length=len(item),
            )  # fmt: skip
            assert isinstance(unproven, DecryptionFailed)  # the proof is not ciphertext
            item = peeled
        if "payload" in onion:
            assert item.hex() == onion["payload"]


def test_the_garbage_items_do_not_peel() -> None:
    trudy = p_submission("trudy")
    onions = {o["index"]: o for o in trudy["inner_onions"]}
    assert onions[0]["garbage"] == "no-owner at hop 2"
    assert onions[1]["garbage"] == "undecryptable at hop 1"
    undecryptable = h(onions[1]["onion"])
    copied = h(onions[0]["layers"][0]["plaintext"])
    dave_hop2 = h(p_submission("dave")["inner_onions"][0]["layers"][1]["layer"])
    assert copied[:80] == dave_hop2[:80] and copied != dave_hop2  # E and proof copied
    for item, hop, is_owned in ((undecryptable, 1, True), (copied, 2, False)):
        [peeled] = peel_many(
            [item], p_round_key(hop), chain_id=P_CHAIN_ID, round_id=P_ROUND, hop_index=hop,
            expected_length=len(item), proven=True,
        )  # fmt: skip
        assert isinstance(peeled, DecryptionFailed)
        assert owned(item, chain_id=P_CHAIN_ID, round_id=P_ROUND, hop=hop) is is_owned
        assert owned_by_spec(item, hop) is is_owned
    # dave's own hop-2 item is owned; the copy's proof fails only for its other ciphertext
    assert owned_by_spec(dave_hop2, 2)


P_ACCUSATIONS: list[dict[str, Any]] = PROVEN["accusations"]


def p_steps(vector: dict[str, Any]) -> tuple[Step, ...]:
    return tuple(
        Step(s["hop"], h(s["item"]), h(s["shared_secret"]), h(s["proof"])) for s in vector["steps"]
    )


@pytest.mark.parametrize("vector", P_ACCUSATIONS, ids=[a["failure"] for a in P_ACCUSATIONS])
def test_proven_accusation_steps(vector: dict[str, Any]) -> None:
    """§ 13.1 on a proven chain: the context hashes the whole item; a revealed ``S`` opens
    ``y[80:]`` (or, for ``undecryptable``, does not); a ``no-owner`` step reveals nothing."""
    trudy = p_submission("trudy")
    assert h(vector["steps"][0]["item"]) == h(trudy["items"][vector["index"]])
    last = len(vector["steps"]) - 1
    for position, step in enumerate(vector["steps"]):
        hop = step["hop"]
        item = h(step["item"])
        assert step["ownership_proof"] == item[32:80].hex()
        assert step["ciphertext"] == item[80:].hex()
        assert step["owned"] is owned_by_spec(item, hop)
        ad = spec_binding(P_CHAIN_ID, P_ROUND, hop)
        assert step["associated_data"] == ad.hex()
        if step["shared_secret"] == "":
            assert (vector["failure"], position, step["proof"]) == ("no-owner", last, "")
            assert not step["owned"]
            continue
        context = (
            prefixed(b"mixnet/blame-step/v1") + prefixed(P_CHAIN_ID.encode("utf-8"))
            + struct.pack(">QH", P_ROUND, hop) + hashlib.blake2b(item, digest_size=32).digest()
        )  # fmt: skip
        assert context.hex() == step["context"]
        secret = bindings.crypto_scalarmult(h(P_MIXES[hop]["round_secret"]), item[:32])
        assert secret.hex() == step["shared_secret"]
        public = h(P_MIXES[hop]["round_public"])
        verify_shared_secret(public, item[:32], secret, h(step["proof"]), context=context)
        key, nonce = spec_kdf(secret, item[:32], public)
        assert (key.hex(), nonce.hex()) == (step["key"], step["nonce"])
        if step["opens"]:
            inner = bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[80:], ad, nonce, key)
            assert inner.hex() == step["inner"] == vector["steps"][position + 1]["item"]
        else:
            assert (vector["failure"], position, step["owned"]) == ("undecryptable", last, True)
            with pytest.raises(CryptoError):
                bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[80:], ad, nonce, key)
            with pytest.raises(DecryptionFailed):
                open_layer(
                    item, secret, public, chain_id=P_CHAIN_ID, round_id=P_ROUND, hop=hop,
                    proven=True,
                )  # fmt: skip


@pytest.mark.parametrize("vector", P_ACCUSATIONS, ids=[a["failure"] for a in P_ACCUSATIONS])
def test_proven_accusations_verify(vector: dict[str, Any]) -> None:
    """§ 13.3: each holds on the proven chain, and never on a chain without proofs."""
    accusation = Accusation(Failure(vector["failure"]), p_steps(vector))
    keys = {m["hop"]: h(m["round_public"]) for m in P_MIXES}
    verify_accusation(
        accusation, keys, chain_id=P_CHAIN_ID, round_id=P_ROUND, mixes=len(P_MIXES),
        validator=accept_all, proven=True,
    )  # fmt: skip
    with pytest.raises(InvalidEvidence):
        verify_accusation(
            accusation, keys, chain_id=P_CHAIN_ID, round_id=P_ROUND, mixes=len(P_MIXES),
            validator=accept_all,
        )  # fmt: skip
    with pytest.raises(InvalidEvidence):  # bound to the round
        verify_accusation(
            accusation, keys, chain_id=P_CHAIN_ID, round_id=P_ROUND + 1, mixes=len(P_MIXES),
            validator=accept_all, proven=True,
        )  # fmt: skip
    # the mix that could not peel the item proves the same failure about it
    last = accusation.steps[-1]
    made = prove_failure(
        h(P_MIXES[last.hop]["round_secret"]), keys[last.hop], last.item, chain_id=P_CHAIN_ID,
        round_id=P_ROUND, hop=last.hop,
    )  # fmt: skip
    assert failure_of(made) is accusation.failure
    assert made.shared_secret == last.shared_secret  # the same S, or nothing
    if accusation.failure is Failure.NO_OWNER:
        assert made == last == Step(last.hop, last.item, b"", b"")


def test_false_proven_accusations_fail() -> None:
    keys = {m["hop"]: h(m["round_public"]) for m in P_MIXES}
    dave_item = h(p_submission("dave")["items"][0])
    undecryptable = p_steps(P_ACCUSATIONS[0])
    no_owner = p_steps(P_ACCUSATIONS[1])
    for wrong in (
        Accusation(Failure.NO_OWNER, (Step(1, dave_item, b"", b""),)),  # its proof holds
        Accusation(Failure.NO_OWNER, undecryptable),  # its proof holds
        Accusation(Failure.UNDECRYPTABLE, no_owner[:1]),  # the layer opens
        Accusation(Failure.UNDECRYPTABLE, (no_owner[0], Step(2, no_owner[1].item, b"", b""))),
        Accusation(Failure.NO_OWNER, (Step(1, no_owner[0].item, b"", b""), no_owner[1])),
        Accusation(Failure.INVALID_PAYLOAD, no_owner),
    ):
        with pytest.raises(InvalidEvidence):
            verify_accusation(
                wrong, keys, chain_id=P_CHAIN_ID, round_id=P_ROUND, mixes=len(P_MIXES),
                validator=accept_all, proven=True,
            )  # fmt: skip


def proven_limits(receiver: str) -> FrameLimits:
    names = [m["name"] for m in P_MIXES] + [CHAIN["sink"]]
    return FrameLimits(
        chain_id=P_CHAIN_ID,
        submission_length=PROVEN["submission_length"],
        item_length=PROVEN["item_lengths"][names.index(receiver)],
        chunk_items=4096,
        announcements=len(P_MIXES),
        mixes=len(P_MIXES),
    )


P_FRAMES: list[dict[str, Any]] = PROVEN["frames"]


@pytest.mark.parametrize("vector", P_FRAMES, ids=[f["name"] for f in P_FRAMES])
def test_proven_frame_bytes(vector: dict[str, Any]) -> None:
    fields = from_json(vector["fields"])
    data = h(vector["msgpack"])
    assert encode_frame(fields) == data
    decoded = decode_frame(data, max_size=len(data))
    assert decoded == {**fields, "v": WIRE_VERSION}
    limits = proven_limits(vector["to"])
    if vector["parse"] == "request":
        assert to_wire(parse_request(fields["type"], decoded, limits)) == fields
    else:
        assert vector["parse"] == "reply"
        assert to_wire(parse_reply(decoded, limits)) == fields


def test_proven_frames_tell_the_trace() -> None:
    frames = {f["name"]: from_json(f["fields"]) for f in P_FRAMES}
    (own,) = frames["accused (mix3 to mix2)"]["accusations"]
    assert own["failure"] == "no-owner"
    (step,) = own["steps"]
    assert (step["hop"], step["secret"], step["proof"]) == (2, b"", b"")
    packed = h(next(f["msgpack"] for f in P_FRAMES if f["name"] == "accused (mix3 to mix2)"))
    assert b"\xa6secret\xc4\x00" in packed and b"\xa5proof\xc4\x00" in packed  # empty bin
    reply = frames["accused (mix2 to mix1)"]["accusations"]
    assert [a["failure"] for a in reply] == ["undecryptable", "no-owner"]
    for wire, vector in zip(reply, P_ACCUSATIONS, strict=True):
        assert [s["item"] for s in wire["steps"]] == [h(s["item"]) for s in vector["steps"]]
        assert [s["secret"] for s in wire["steps"]] == [
            h(s["shared_secret"]) for s in vector["steps"]
        ]
    assert frames["exclude (mix1 to mix2)"]["items"] == [
        h(i) for i in p_submission("trudy")["items"]
    ]


def test_a_step_with_a_secret_but_no_proof_is_refused() -> None:
    fields = from_json(P_FRAMES[0]["fields"])
    fields["accusations"][0]["steps"][0]["secret"] = bytes(32)
    decoded = decode_frame(encode_frame(fields), max_size=1 << 20)
    with pytest.raises(MixnetError):
        parse_reply(decoded, proven_limits("mix2"))


def test_wrap_submission_with_proofs_verifies_by_the_spec() -> None:
    """The code's proven boxes (random keys and nonces): every inner layer's ownership proof
    verifies with the specification's construction alone, and the items peel to the
    payloads."""
    payloads = [h(o["payload"]) for o in p_submission("dave")["inner_onions"]]
    secrets = [h(m["round_secret"]) for m in P_MIXES]
    publics = [h(m["round_public"]) for m in P_MIXES]
    box = wrap_submission(payloads, publics, chain_id=P_CHAIN_ID, round_id=P_ROUND, proven=True)
    assert len(box) == PROVEN["submission_length"]
    plaintext = spec_open(box, secrets[0], P_CHAIN_ID, P_ROUND, 0)
    width = PROVEN["inner_onion_length"]
    items = [plaintext[i : i + width] for i in range(0, len(plaintext), width)]
    for item, payload in zip(items, payloads, strict=True):
        for hop in range(1, len(P_MIXES)):
            assert owned_by_spec(item, hop)
            shared = bindings.crypto_scalarmult(secrets[hop], item[:32])
            key, nonce = spec_kdf(shared, item[:32], publics[hop])
            ad = spec_binding(P_CHAIN_ID, P_ROUND, hop)
            item = bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[80:], ad, nonce, key)
        assert item == payload


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
    elif kind == "submit-many":
        alice, bob = parse_submit_many(decoded, limits, max_count=2)
        assert isinstance(alice, Submit) and isinstance(bob, BadLength)
        assert submit_many_frame([alice]) == {**fields, "submissions": fields["submissions"][:1]}
    elif kind == "receipts":
        sent = [
            Submit(s["round"], s["client"], s["box"])
            for s in from_json(frame("submit-many"))["submissions"]
        ]
        accepted, refused = parse_receipts(decoded, sent).results
        assert accepted is None and isinstance(refused, BadLength)
    else:
        assert kind == "none"


def test_paged_verdict_frames() -> None:
    """§ 6.3: a page other than 0, a page that promises more, and an exclusion in pages carry
    their page fields (single-page frames leave them out) and parse back to them."""
    limits = limits_for("mix2")
    trace = parse_request("trace", frame("trace (page 1)"), limits)
    assert trace == Trace(ROUND, 1) and "page" not in frame("trace")
    accused, single = (parse_reply(frame(name), limits)
                       for name in ("accused (a page, more follow)", "accused"))  # fmt: skip
    assert isinstance(accused, Accused) and isinstance(single, Accused)
    assert accused.more and not single.more and accused.accusations == single.accusations
    assert "more" not in frame("accused")
    exclude, whole = (parse_request("exclude", frame(name), limits)
                      for name in ("exclude (page 0 of 2)", "exclude"))  # fmt: skip
    assert isinstance(exclude, Exclude) and isinstance(whole, Exclude)
    assert (exclude.page, exclude.pages, exclude.final) == (0, 2, False)
    assert exclude.items == whole.items and whole.final
    assert "pages" not in frame("exclude")


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
    assert sorted(frame("batch (mix2 to mix3)")["payloads"]) == sorted(
        hop_item(vector["client"], i, 2) for vector in SUBMISSIONS for i in range(MESSAGES)
    )
    alice = {h(p) for p in submission("alice")["payloads"]}
    assert set(frame("batch (to the analyzer)")["payloads"]) == alice
    # every mix signs every chunk it sends to a mix (§ 6.3, § 8.5); the last mix's chunks to
    # the sink carry no signature
    senders = [frame(name)["sender"] for name in ("batch", "batch (mix2 to mix3)",
                                                  "batch (to the analyzer)")]  # fmt: skip
    assert senders == [m["name"] for m in MIXES]
    for name in ("batch", "batch (mix2 to mix3)"):
        assert len(frame(name)["signature"]) == 64
    assert "signature" not in frame("batch (to the analyzer)")
    # each accusation carries the delivery of its first item by the accuser's predecessor
    for name, hop in (("accused (mix3 to mix2)", 2), ("accused", 1)):
        (accusation,) = frame(name)["accusations"]
        assert accusation["steps"][0]["hop"] == hop
        assert accusation["delivery"]["sender"] == MIXES[hop - 1]["name"]


def test_every_frame_type_has_a_vector() -> None:
    types = {vector["fields"]["type"] for vector in VECTORS["frames"]}
    assert types >= {
        "get-round", "round", "submit", "accepted", "error", "challenge", "authenticate",
        "authenticated", "open-round", "round-keys", "abort-round", "aborted", "batch",
        "batch-ack", "trace", "accused", "exclude", "excluded", "subscribe", "pending",
        "result", "submit-many", "receipts",
    }  # fmt: skip


def test_error_codes_of_version_2() -> None:
    """§ 7: decryption-failed covers a wrong binding; binding-mismatch is gone."""
    assert ERRORS_BY_CODE["decryption-failed"] is DecryptionFailed
    assert "binding-mismatch" not in ERRORS_BY_CODE
    assert issubclass(DecryptionFailed, MixnetError)


# --------------------------------------------------------------------------- signed chunks

SIGNED: dict[str, Any] = VECTORS["signed_chunks"]
BLAME: dict[str, Any] = SIGNED["blame"]
B_ROUND: int = BLAME["round"]
IDENTITY_SEEDS = {m["name"]: h(m["identity_seed"]) for m in MIXES}
IDENTITIES = {m["name"]: h(m["identity_public"]) for m in MIXES}


def spec_h(data: bytes) -> bytes:
    """§ 8.5: ``H`` is BLAKE2b-256, no key, no personalisation."""
    return hashlib.blake2b(data, digest_size=32).digest()


def spec_split(n: int) -> int:
    """§ 8.5: the largest power of two strictly below ``n`` (``n ≥ 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def spec_mth(items: list[bytes]) -> bytes:
    """§ 8.5 ``MTH``, restated from RFC 6962 § 2.1 with BLAKE2b-256."""
    if not items:
        return spec_h(b"")
    if len(items) == 1:
        return spec_h(b"\x00" + items[0])
    k = spec_split(len(items))
    return spec_h(b"\x01" + spec_mth(items[:k]) + spec_mth(items[k:]))


def spec_path(m: int, items: list[bytes]) -> list[bytes]:
    """§ 8.5 ``PATH(m, D[0:n])``, restated from RFC 6962 § 2.1.1."""
    if len(items) <= 1:
        return []
    k = spec_split(len(items))
    if m < k:
        return [*spec_path(m, items[:k]), spec_mth(items[k:])]
    return [*spec_path(m - k, items[k:]), spec_mth(items[:k])]


def spec_path_root(item: bytes, m: int, n: int, path: list[bytes]) -> bytes | None:
    """§ 8.5 "Checking a path", restated as RFC 9162 § 2.1.3.2 writes it (bit by bit, from
    the leaf up), a different algorithm from the recursive one above."""
    if not 0 <= m < n or any(len(p) != 32 for p in path):
        return None
    fn, sn = m, n - 1
    r = spec_h(b"\x00" + item)
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = spec_h(b"\x01" + p + r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = spec_h(b"\x01" + r + p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def spec_chunk_message(chain_id: str, round_id: int, sender: str, index: int, count: int,
                       root: bytes) -> bytes:  # fmt: skip
    """§ 8.5: the bytes a chunk signature covers."""
    return (
        prefixed(b"mixnet/chunk/v1")
        + prefixed(chain_id.encode("utf-8"))
        + struct.pack(">Q", round_id)
        + prefixed(sender.encode("utf-8"))
        + struct.pack(">II", index, count)
        + root
    )


def spec_delivered(delivery: dict[str, Any], item: bytes, sender: str, chain_id: str,
                   round_id: int) -> bool:  # fmt: skip
    """§ 13.4: whether a delivery map proves that ``sender`` signed a chunk holding ``item``
    (PyNaCl's Ed25519 only)."""
    if delivery["sender"] != sender:
        return False
    root = spec_path_root(item, delivery["position"], delivery["count"], list(delivery["path"]))
    if root is None:
        return False
    message = spec_chunk_message(chain_id, round_id, sender, delivery["chunk"],
                                 delivery["count"], root)  # fmt: skip
    try:
        VerifyKey(IDENTITIES[sender]).verify(message, delivery["signature"])
    except BadSignatureError:
        return False
    return True


def test_chunk_signature_domain() -> None:
    assert SIGNED["domain"] == "mixnet/chunk/v1"
    assert SIGNATURE_LENGTH == 64 and MAX_PATH == 32


@pytest.mark.parametrize(
    "tree", SIGNED["trees"], ids=[f"n{len(t['items'])}" for t in SIGNED["trees"]]
)
def test_merkle_tree(tree: dict[str, Any]) -> None:
    items = [h(i) for i in tree["items"]]
    n = len(items)
    assert [spec_h(b"\x00" + i).hex() for i in items] == tree["leaf_hashes"]
    assert [leaf_hash(i).hex() for i in items] == tree["leaf_hashes"]
    assert spec_mth(items).hex() == tree["root"] == chunk_root(items).hex()
    if n == 0:
        assert tree["root"] == hashlib.blake2b(b"", digest_size=32).hexdigest()
    if n == 1:
        assert tree["root"] == tree["leaf_hashes"][0]
    assert len(tree["paths"]) == n
    root = h(tree["root"])
    for m, (item, hexpath) in enumerate(zip(items, tree["paths"], strict=True)):
        path = [h(p) for p in hexpath]
        assert spec_path(m, items) == path
        assert list(inclusion_path(items, m)) == path
        assert spec_path_root(item, m, n, path) == root
        assert path_root(item, m, n, path) == root
        # the path proves this item at this position of a chunk of n items only
        assert path_root(item + b"\x00", m, n, path) != root
        for other_m, other_n in ((m + 1, n), (m, n + 1), (m, 2 * n)):
            if 0 <= other_m < other_n:
                proved = path_root(item, other_m, other_n, path)
                assert proved in (None, spec_path_root(item, other_m, other_n, path))
                if other_n == n:
                    assert proved != root
        assert path_root(item, m, n, [*path, bytes(32)]) is None
        assert path_root(item, n, n, path) is None
    with pytest.raises(IndexError):
        inclusion_path(items, n)


CHUNKS: list[dict[str, Any]] = [*SIGNED["chunks"], BLAME["chunk"]]
CHUNK_IDS = [f"{c['sender']}-r{c['round']}-c{c['index']}" for c in CHUNKS]


@pytest.mark.parametrize("chunk", CHUNKS, ids=CHUNK_IDS)
def test_signed_chunk(chunk: dict[str, Any]) -> None:
    items = [h(i) for i in chunk["items"]]
    assert chunk["count"] == len(items) and chunk["chain_id"] == CHAIN_ID
    assert chunk["identity_public"] == IDENTITIES[chunk["sender"]].hex()
    root = spec_mth(items)
    assert root.hex() == chunk["root"]
    assert [[p.hex() for p in spec_path(m, items)] for m in range(len(items))] == chunk["paths"]
    sender, index, round_id = chunk["sender"], chunk["index"], chunk["round"]
    message = spec_chunk_message(CHAIN_ID, round_id, sender, index, len(items), root)
    assert message.hex() == chunk["signed_bytes"]
    assert message[:19] == b"\x00\x00\x00\x0fmixnet/chunk/v1"
    assert len(message) == 4 + 15 + 4 + len(CHAIN_ID) + 8 + 4 + len(sender) + 4 + 4 + 32
    key = SigningKey(IDENTITY_SEEDS[sender])
    signature = key.sign(message).signature  # Ed25519 is deterministic
    assert signature.hex() == chunk["signature"]
    VerifyKey(IDENTITIES[sender]).verify(message, signature)
    # the code signs and checks the same bytes
    assert chunk_message(chain_id=CHAIN_ID, round_id=round_id, sender=sender, index=index,
                         count=len(items), root=root) == message  # fmt: skip
    assert sign_chunk(key, chain_id=CHAIN_ID, round_id=round_id, sender=sender, index=index,
                      items=items) == signature  # fmt: skip
    verify = key.verify_key
    assert verify_chunk(verify, signature, chain_id=CHAIN_ID, round_id=round_id, sender=sender,
                        index=index, items=items)  # fmt: skip
    for wrong in (
        {"round_id": round_id + 1, "index": index, "items": items},
        {"round_id": round_id, "index": index + 1, "items": items},
        {"round_id": round_id, "index": index, "items": items[::-1]},
        {"round_id": round_id, "index": index, "items": items[:-1]},
    ):
        assert not verify_chunk(verify, signature, chain_id=CHAIN_ID, sender=sender, **wrong)
    assert not verify_chunk(verify, signature, chain_id=CHAIN_ID + "2", round_id=round_id,
                            sender=sender, index=index, items=items)  # fmt: skip
    # the batch frame that carries the chunk
    frames = VECTORS["frames"] if round_id == ROUND else BLAME["frames"]
    (vector,) = [f for f in frames if f["name"] == chunk["frame"]]
    fields = from_json(vector["fields"])
    assert fields["type"] == "batch" and vector["from"] == sender
    assert (fields["round"], fields["sender"], fields["chunk"]) == (round_id, sender, index)
    assert fields["payloads"] == items and fields["signature"] == signature
    parsed = parse_request("batch", decode_frame(h(vector["msgpack"]), max_size=1 << 20),
                           limits_for(vector["to"]))  # fmt: skip
    assert isinstance(parsed, Batch) and parsed.signature == signature


def signing_of(names: list[str]) -> ChunkSigning:
    return ChunkSigning(CHAIN_ID, tuple(names), {n: IDENTITIES[n] for n in names})


@pytest.mark.parametrize("chunk", CHUNKS, ids=CHUNK_IDS)
def test_a_mix_refuses_a_chunk_that_is_not_signed_by_its_sender(chunk: dict[str, Any]) -> None:
    """§ 6.3: a mix refuses an unsigned or badly signed chunk with ``bad-signature``."""
    signing = signing_of([m["name"] for m in MIXES])
    items = [h(i) for i in chunk["items"]]
    sender, index, round_id = chunk["sender"], chunk["index"], chunk["round"]
    signature = h(chunk["signature"])
    signing.check(round_id, sender, index, items, signature)
    other = next(n for n in IDENTITIES if n != sender)
    tampered = bytes([signature[0] ^ 1]) + signature[1:]
    for args in (
        (round_id, sender, index, items, None),  # unsigned
        (round_id, sender, index, items, tampered),
        (round_id, sender, index + 1, items, signature),  # another chunk index
        (round_id + 1, sender, index, items, signature),  # another round
        (round_id, sender, index, [*items[1:], items[0]], signature),  # reordered
        (round_id, sender, index, items[:-1], signature),  # an item left out
        (round_id, other, index, items, signature),  # signed by another mix
    ):
        with pytest.raises(BadSignature) as caught:
            signing.check(*args)
        assert caught.value.code == "bad-signature"
        assert ERRORS_BY_CODE["bad-signature"] is BadSignature


def accusation_map(frames: list[dict[str, Any]], name: str, index: int = 0) -> dict[str, Any]:
    (vector,) = [f for f in frames if f["name"] == name]
    fields = from_json(vector["fields"])
    accusation: dict[str, Any] = fields["accusations"][index]
    return accusation


@pytest.mark.parametrize(
    "vector", SIGNED["deliveries"], ids=[d["frame"] for d in SIGNED["deliveries"]]
)
def test_delivery_in_an_accusation(vector: dict[str, Any]) -> None:
    """§ 13.3: an accusation carries the predecessor's delivery of its first item."""
    wire = accusation_map(VECTORS["frames"], vector["frame"])
    delivery = wire["delivery"]
    assert list(delivery) == ["sender", "chunk", "count", "position", "path", "signature"]
    item = h(vector["item"])
    assert wire["steps"][0]["item"] == item
    assert item == hop_item(vector["client"], vector["index"], vector["hop"])
    assert wire["steps"][0]["hop"] == vector["hop"]
    assert delivery["sender"] == MIXES[vector["hop"] - 1]["name"] == vector["sender"]
    assert (delivery["chunk"], delivery["count"], delivery["position"]) == (
        vector["chunk"], vector["count"], vector["position"]
    )  # fmt: skip
    assert delivery["path"] == [h(p) for p in vector["path"]]
    assert delivery["signature"] == h(vector["signature"])
    (chunk,) = [c for c in SIGNED["chunks"] if c["sender"] == delivery["sender"]]
    assert chunk["items"][delivery["position"]] == vector["item"]
    assert chunk["signature"] == vector["signature"]
    root = spec_path_root(item, delivery["position"], delivery["count"], delivery["path"])
    assert root is not None and root.hex() == vector["root"] == chunk["root"]
    message = spec_chunk_message(CHAIN_ID, ROUND, delivery["sender"], delivery["chunk"],
                                 delivery["count"], root)  # fmt: skip
    assert message.hex() == vector["signed_bytes"]
    assert spec_delivered(delivery, item, vector["sender"], CHAIN_ID, ROUND)
    assert not spec_delivered(delivery, item, vector["sender"], CHAIN_ID, ROUND + 1)
    # the code reads the same delivery and checks it the same way
    (accusation,) = parse_accusations([wire], max_count=1, max_steps=HOPS,
                                      max_item_length=CHAIN["item_lengths"][1])  # fmt: skip
    assert accusation.delivery == Delivery(
        delivery["sender"], delivery["chunk"], delivery["count"], delivery["position"],
        tuple(delivery["path"]), delivery["signature"],
    )  # fmt: skip
    assert accusation_to_wire(accusation) == wire
    key = VerifyKey(IDENTITIES[vector["sender"]])
    assert verify_delivery(accusation.delivery, item, key, chain_id=CHAIN_ID, round_id=ROUND)
    assert delivered_by(accusation, vector["sender"], IDENTITIES[vector["sender"]],
                        chain_id=CHAIN_ID, round_id=ROUND)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"position": 8}, MixnetError),  # not below count
        ({"count": 0, "position": 0}, MixnetError),
        ({"path": [bytes(31)] * 3}, BadLength),
        ({"path": [bytes(32)] * 33}, MixnetError),
        ({"signature": bytes(63)}, BadLength),
        ({"chunk": -1}, MixnetError),
        ({"sender": b"mix1"}, MalformedFrame),
    ],
    ids=["position", "count", "path-entry", "path-long", "signature", "chunk", "sender-bin"],
)
def test_a_malformed_delivery_is_refused(change: dict[str, Any], error: type[Exception]) -> None:
    (vector,) = [f for f in VECTORS["frames"] if f["name"] == "accused"]
    fields = from_json(vector["fields"])
    fields["accusations"][0]["delivery"].update(change)
    decoded = decode_frame(encode_frame(fields), max_size=1 << 20)
    with pytest.raises(error):
        parse_reply(decoded, limits_for("mix1"))


# ------------------------------------------------------------------ the blame (round 9)


def b_mix(hop: int) -> dict[str, Any]:
    mix: dict[str, Any] = BLAME["mixes"][hop]
    assert mix["hop"] == hop and mix["name"] == MIXES[hop]["name"]
    assert mix["identity_public"] == MIXES[hop]["identity_public"]  # identities do not change
    return mix


def b_keys() -> dict[int, bytes]:
    return {hop: h(b_mix(hop)["round_public"]) for hop in range(HOPS)}


def test_blame_forged_item_and_step() -> None:
    """mix2 put a layer for mix3 around an invalid payload into chunk 1 of its batch; mix3's
    step about it reveals ``S`` and the layer opens to that payload."""
    forged = BLAME["forged_layer"]
    chunk = BLAME["chunk"]
    position = BLAME["position"]
    item = h(chunk["items"][position])
    assert forged["layer"] == chunk["items"][position] and forged["hop"] == 2
    assert chunk["sender"] == "mix2" and chunk["round"] == B_ROUND
    mix3 = b_mix(2)
    assert bindings.crypto_scalarmult_base(h(mix3["round_secret"])).hex() == mix3["round_public"]
    payload = spec_open(item, h(mix3["round_secret"]), CHAIN_ID, B_ROUND, 2)
    assert payload.hex() == forged["plaintext"] == BLAME["step"]["inner"]
    assert not trace_validator(payload)
    step = BLAME["step"]
    assert step["item"] == item.hex() and step["hop"] == 2
    context = (
        prefixed(b"mixnet/blame-step/v1")
        + prefixed(CHAIN_ID.encode("utf-8"))
        + struct.pack(">QH", B_ROUND, 2)
        + hashlib.blake2b(item, digest_size=32).digest()
    )
    assert context.hex() == step["context"]
    secret = bindings.crypto_scalarmult(h(mix3["round_secret"]), item[:32])
    assert secret.hex() == step["shared_secret"]
    verify_shared_secret(h(mix3["round_public"]), item[:32], secret, h(step["proof"]),
                         context=context)  # fmt: skip
    # the other items of the chunk are honest layers for mix3
    for other, text in enumerate(chunk["items"]):
        if other != position:
            inner = spec_open(h(text), h(mix3["round_secret"]), CHAIN_ID, B_ROUND, 2)
            assert trace_validator(inner)


def test_blame_delivery() -> None:
    chunk, delivery = BLAME["chunk"], BLAME["delivery"]
    position = BLAME["position"]
    assert (delivery["sender"], delivery["chunk"], delivery["count"], delivery["position"]) == (
        chunk["sender"], chunk["index"], chunk["count"], position
    )  # fmt: skip
    assert delivery["path"] == chunk["paths"][position]
    wire = {**delivery, "path": [h(p) for p in delivery["path"]],
            "signature": h(delivery["signature"])}  # fmt: skip
    assert spec_delivered(wire, h(delivery["item"]), "mix2", CHAIN_ID, B_ROUND)


def b_frames() -> dict[str, dict[str, Any]]:
    return {f["name"]: dict(from_json(f["fields"])) for f in BLAME["frames"]}


@pytest.mark.parametrize("vector", BLAME["frames"], ids=[f["name"] for f in BLAME["frames"]])
def test_blame_frame_bytes(vector: dict[str, Any]) -> None:
    fields = from_json(vector["fields"])
    data = h(vector["msgpack"])
    assert encode_frame(fields) == data
    decoded = decode_frame(data, max_size=len(data))
    assert decoded == {**fields, "v": WIRE_VERSION}
    limits = limits_for(vector["to"])
    if vector["parse"] == "request":
        assert to_wire(parse_request(fields["type"], decoded, limits)) == fields
    else:
        assert vector["parse"] == "reply"
        assert to_wire(parse_reply(decoded, limits)) == fields


def test_blame_frames_tell_the_story() -> None:
    """§ 13.4: mix3 accuses the forged item with mix2's delivery, on a page it signs; mix2
    cannot trace it and answers ``blame`` with that accusation as ``evidence``, its proof on
    mix3's page and mix2's signed refusal; the entry mix judges it, names mix2 and aborts the
    round."""
    frames = b_frames()
    batch = frames["batch (mix2 to mix3)"]
    shape = BLAME["batch"]
    assert (batch["chunks"], batch["count"], batch["clients"]) == (
        shape["chunks"], shape["count"], shape["clients"]
    )  # fmt: skip
    assert len(batch["payloads"]) <= BLAME["chunk_size"] < batch["count"]
    (accusation,) = frames["accused (mix3 to mix2)"]["accusations"]
    assert accusation["failure"] == "invalid-payload"
    assert accusation["delivery"] == {
        **{k: BLAME["delivery"][k] for k in ("sender", "chunk", "count", "position")},
        "path": [h(p) for p in BLAME["delivery"]["path"]],
        "signature": h(BLAME["delivery"]["signature"]),
    }
    assert frames["accused (mix3 to mix2)"]["signature"] == h(BLAME["page"]["signature"])
    blame = frames["accused (mix2 to mix1)"]
    on_page = {"count": 1, "position": 0, "path": [], "signature": h(BLAME["page"]["signature"])}
    assert blame == {"type": "accused", "round": B_ROUND, "accusations": [], "untraced": 0,
                     "blame": "mix3", "evidence": accusation, "evidence_proof": on_page,
                     "refusal": h(BLAME["refusal"]["signature"])}  # fmt: skip
    exclude = frames["exclude (mix1 to mix2)"]
    assert (exclude["items"], exclude["excluded"]) == ([], 0)
    assert exclude["abort"] == BLAME["judgements"][0]["reason"]
    assert (
        exclude["abort"] == "mix mix2 sent a provably bad item it had signed and would not trace it"
    )


def spec_accusation_bytes(wire: dict[str, Any]) -> bytes:
    """§ 13.5: an accusation's canonical bytes, from its wire map."""
    out = prefixed(wire["failure"].encode("ascii")) + struct.pack(">H", len(wire["steps"]))
    for step in wire["steps"]:
        out += struct.pack(">H", step["hop"])
        out += prefixed(step["item"]) + prefixed(step["secret"]) + prefixed(step["proof"])
    d = wire.get("delivery")
    if d is None:
        return out + b"\x00"
    return (
        out + b"\x01" + prefixed(d["sender"].encode("utf-8"))
        + struct.pack(">III", d["chunk"], d["count"], d["position"])
        + struct.pack(">H", len(d["path"])) + b"".join(d["path"]) + bytes(d["signature"])
    )  # fmt: skip


def spec_signed(signer: str, message: bytes, signature: bytes | None) -> bool:
    if signature is None:
        return False
    try:
        VerifyKey(IDENTITIES[signer]).verify(message, signature)
    except BadSignatureError:
        return False
    return True


def spec_on_page(wire: dict[str, Any], proof: dict[str, Any] | None, signer: str) -> bool:
    """§ 13.5: whether ``proof`` shows the accusation ``wire`` on a page ``signer`` signed."""
    if proof is None:
        return False
    root = spec_path_root(spec_accusation_bytes(wire), proof["position"], proof["count"],
                          list(proof["path"]))  # fmt: skip
    if root is None:
        return False
    message = (prefixed(b"mixnet/accused-page/v1") + prefixed(CHAIN_ID.encode("utf-8"))
               + struct.pack(">Q", B_ROUND) + prefixed(signer.encode("utf-8"))
               + struct.pack(">I", proof["count"]) + root)  # fmt: skip
    return spec_signed(signer, message, proof["signature"])


def spec_refused(wire: dict[str, Any], refusal: bytes | None, refuser: str) -> bool:
    """§ 13.5: whether ``refusal`` is ``refuser``'s signature over its refusal of ``wire``."""
    leaf = spec_h(b"\x00" + spec_accusation_bytes(wire))
    message = (prefixed(b"mixnet/refusal/v1") + prefixed(CHAIN_ID.encode("utf-8"))
               + struct.pack(">Q", B_ROUND) + prefixed(refuser.encode("utf-8")) + leaf)  # fmt: skip
    return spec_signed(refuser, message, refusal)


def test_a_page_and_a_refusal_signed_as_specified() -> None:
    """§ 13.5: the vector's page of one accusation and its refusal, byte for byte."""
    page, refusal = BLAME["page"], BLAME["refusal"]
    (wire,) = [from_json(f["fields"]) for f in BLAME["frames"] if f["name"].startswith(
        "accused (mix3")]  # fmt: skip
    (accusation,) = wire["accusations"]
    encoded = spec_accusation_bytes(accusation)
    assert [h(e) for e in page["accusation_bytes"]] == [encoded]
    root = spec_mth([encoded])
    assert h(page["root"]) == root
    message = h(page["signed_bytes"])
    assert message == (prefixed(b"mixnet/accused-page/v1") + prefixed(CHAIN_ID.encode("utf-8"))
                       + struct.pack(">Q", B_ROUND) + prefixed(b"mix3") + struct.pack(">I", 1)
                       + root)  # fmt: skip
    assert spec_signed("mix3", message, h(page["signature"])) and wire["signature"] == h(
        page["signature"])  # fmt: skip
    (parsed,) = parse_accusations([accusation], max_count=1, max_steps=HOPS,
                                  max_item_length=CHAIN["item_lengths"][1])  # fmt: skip
    assert accusation_bytes(parsed) == encoded
    assert spec_refused(accusation, h(refusal["signature"]), "mix2")
    assert h(refusal["leaf"]) == spec_h(b"\x00" + encoded)
    assert verify_refusal(IDENTITIES["mix2"], h(refusal["signature"]), parsed,
                          chain_id=CHAIN_ID, round_id=B_ROUND, refuser="mix2")  # fmt: skip


@pytest.mark.parametrize("case", BLAME["judgements"], ids=[j["case"] for j in BLAME["judgements"]])
def test_blame_judgement(case: dict[str, Any]) -> None:
    """§ 13.4: the judge of a blame reported by the blamer (the accuser's predecessor) names
    the blamer if its refusal is not signed by it, or if the evidence is not on a page the
    accuser signed; else the blamer iff the evidence holds and carries the blamer's own signed
    delivery of the accused item; else the accuser."""
    wire = from_json(case["evidence"])
    (evidence,) = parse_accusations([wire], max_count=1, max_steps=HOPS,
                                    max_item_length=CHAIN["item_lengths"][1])  # fmt: skip
    assert accusation_to_wire(evidence) == wire
    keys = b_keys()
    try:
        verify_accusation(evidence, keys, chain_id=CHAIN_ID, round_id=B_ROUND, mixes=HOPS,
                          validator=trace_validator)  # fmt: skip
    except InvalidEvidence:
        holds = False
    else:
        holds = True
    assert holds == case["holds"]
    hop = wire["steps"][0]["hop"]
    accuser, blamer = MIXES[hop]["name"], MIXES[hop - 1]["name"]
    item = wire["steps"][0]["item"]
    signed = "delivery" in wire and spec_delivered(wire["delivery"], item, blamer, CHAIN_ID,
                                                   B_ROUND)  # fmt: skip
    assert signed == case["delivered_by_blamer"]
    assert delivered_by(evidence, blamer, IDENTITIES[blamer], chain_id=CHAIN_ID,
                        round_id=B_ROUND) == signed  # fmt: skip
    proof_wire = from_json(case["evidence_proof"])
    refusal = None if case["refusal"] is None else h(case["refusal"])
    refused = spec_refused(wire, refusal, blamer)
    on_page = spec_on_page(wire, proof_wire, accuser)
    backed = refused and on_page  # else the blamer made it up
    named = blamer if not backed or (holds and signed) else accuser
    assert named == case["named"]
    proof = None if proof_wire is None else parse_page_proof(proof_wire)
    verdict = judge(evidence, holds, signing_of([m["name"] for m in MIXES]), B_ROUND,
                    proof=proof, refusal=refusal, reporter=blamer)  # fmt: skip
    assert verdict.name == named
    if not refused:
        assert case["reason"] == f"mix {named} refused an accusation without signing its refusal"
    elif not on_page:
        assert case["reason"] == (
            f"mix {named} refused an accusation that mix {accuser} did not sign"
        )
    elif named == accuser:
        assert case["reason"] == f"mix {named} could not back its accusations"
    else:
        assert case["reason"] == (
            f"mix {named} sent a provably bad item it had signed and would not trace it"
        )
    assert verdict.reason == case["reason"]


