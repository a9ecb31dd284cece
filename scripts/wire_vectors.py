"""Regenerate the wire format's known-answer vectors, ``tests/mixnet/wire_vectors.json``.

The vectors belong to ``docs/wire.md`` (wire version 2). Every input is fixed: keys, seeds and
the layers' ephemeral secrets are BLAKE2b digests of labels, so running this script again
gives the same bytes. The one exception is the Chaum–Pedersen proofs of the trace, which are
randomized: a proof stored in the existing file is kept as long as it still verifies (so the
file is byte-stable), and ``--fresh-proofs`` makes new ones.

    .venv/bin/python scripts/wire_vectors.py            # rewrite the file
    .venv/bin/python scripts/wire_vectors.py --check    # exit 1 if the code makes other bytes

Every layer is built here from the specification's construction (X25519, BLAKE2b-352 with
personalisation ``mixnet-layer-v2``, ChaCha20-Poly1305-IETF with the binding data as
associated data) with a fixed ephemeral secret, and checked against the code
(:func:`mixnet.onion.layer_key`, :func:`mixnet.onion.binding_data`,
:func:`mixnet.onion.peel_many`, :func:`mixnet.onion.submission_length`, ...) before it is
written.

Run it deliberately: the tests (``tests/mixnet/test_wire_vectors.py``,
``tests/cloaknet/test_wire_vectors_cloaknet.py`` and ``tests/integration/test_spec_client.py``)
check the code against the stored file, so an encoding that changes breaks them until the
change is accepted — which for anything a peer sees means bumping the wire version
(``docs/wire.md``, "Versioning").
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
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from cloaknet.analyzer_node import AnalyzerApp
from cloaknet.encoding import encode_share, quantize, split
from cloaknet.noise import noise_p, truncated_laplace_pmf
from cloaknet.params import share_width
from cloaknet.protocol_table import read_protocol_table
from cloaknet.protocols import CloakProtocol
from cloaknet.validator import payload_validator
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
    Step,
    open_layer,
    step_context,
    verify_accusation,
)
from mixnet.chain import RoundPolicy
from mixnet.core.actions import DeliveredBatch
from mixnet.core.intake import item_digest, submission_digest
from mixnet.dleq import InvalidProof, prove_shared_secret, verify_shared_secret
from mixnet.errors import DecryptionFailed, DuplicateClient, MixnetError
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
from mixnet.onion import (
    LAYER_OVERHEAD,
    binding_data,
    layer_key,
    onion_length,
    peel_many,
    submission_length,
)
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
#: The one-mix chain of the ``one_mix`` vector.
SOLO_CHAIN_ID = "vectors-solo"
SOLO_ROUND = 3
SOLO_MIX = "solo"
#: The admission vector: a credentialed client admitted by the issuer's token.
ADMISSION_EXPIRES = 1798761600  # 2027-01-01T00:00:00Z

#: The layer key derivation and binding data, restated from docs/wire.md § 9 (not imported).
KDF_PERSON = b"mixnet-layer-v2"
BINDING_DOMAIN = b"mixnet/onion-layer/v2"

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
    def __init__(self, hop: int, name: str, chain_id: str = CHAIN_ID, round_id: int = ROUND):
        self.hop = hop
        self.name = name
        self.identity = SigningKey(fixed(f"identity/{name}"))
        self.round_secret = fixed(f"round-key/{name}/{round_id}")
        self.round_public = bytes(bindings.crypto_scalarmult_base(self.round_secret))
        self.announcement = announce_round_key(
            self.identity,
            chain_id=chain_id,
            node=name,
            round_id=round_id,
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


# --------------------------------------------------------------------------- onion layers


def spec_binding(chain_id: str, round_id: int, hop: int) -> bytes:
    """docs/wire.md § 9.1: ``lp(domain) || lp(utf8(chain)) || u64be(round) || u16be(hop)``."""
    ad = prefixed(BINDING_DOMAIN) + prefixed(chain_id.encode()) + struct.pack(">QH", round_id, hop)
    assert ad == binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop)
    return ad


def spec_kdf(shared: bytes, ephemeral: bytes, recipient: bytes) -> tuple[bytes, bytes]:
    """docs/wire.md § 9.2: ``key || nonce = BLAKE2b-352["mixnet-layer-v2"](S || E || K)``."""
    okm = hashlib.blake2b(
        shared + ephemeral + recipient, digest_size=44, person=KDF_PERSON
    ).digest()
    key, nonce = okm[:32], okm[32:]
    assert (key, nonce) == layer_key(shared, ephemeral, recipient)
    return key, nonce


def binding_vector(chain_id: str, round_id: int, hop: int) -> dict[str, Any]:
    return {
        "chain_id": chain_id,
        "round": round_id,
        "hop": hop,
        "associated_data": spec_binding(chain_id, round_id, hop).hex(),
    }


def try_open(
    layer: bytes, secret: bytes, *, chain_id: str, round_id: int, hop: int
) -> bytes | MixnetError:
    """The code's peel of one layer (``peel_many``), as the mix at ``hop`` does it."""
    [result] = peel_many(
        [layer], PrivateKey(secret), chain_id=chain_id, round_id=round_id, hop_index=hop,
        expected_length=len(layer),
    )  # fmt: skip
    return result


def build_layer(
    label: str,
    inner: bytes,
    mix: Mix,
    *,
    chain_id: str = CHAIN_ID,
    round_id: int = ROUND,
    bound_hop: int | None = None,
) -> dict[str, Any]:
    """One layer around ``inner`` for ``mix`` with the fixed ephemeral secret of ``label``
    (docs/wire.md § 9.2). ``bound_hop`` (default: the mix's hop) is the hop named in the
    associated data: another value makes a wrongly bound layer."""
    hop = mix.hop if bound_hop is None else bound_hop
    ephemeral_secret = fixed(f"ephemeral/{label}")
    ephemeral_public = bytes(bindings.crypto_scalarmult_base(ephemeral_secret))
    shared = bytes(bindings.crypto_scalarmult(ephemeral_secret, mix.round_public))
    # the recipient computes the same secret with its round key
    assert bytes(bindings.crypto_scalarmult(mix.round_secret, ephemeral_public)) == shared
    key, nonce = spec_kdf(shared, ephemeral_public, mix.round_public)
    ad = spec_binding(chain_id, round_id, hop)
    ciphertext = bytes(bindings.crypto_aead_chacha20poly1305_ietf_encrypt(inner, ad, nonce, key))
    layer = ephemeral_public + ciphertext
    assert len(layer) == len(inner) + LAYER_OVERHEAD
    # anyone with S opens it (the trace), and the mix of that hop peels it
    assert (
        open_layer(layer, shared, mix.round_public, chain_id=chain_id, round_id=round_id, hop=hop)
        == inner
    )
    if hop == mix.hop:
        assert (
            try_open(layer, mix.round_secret, chain_id=chain_id, round_id=round_id, hop=hop)
            == inner
        )
    return {
        "hop": hop,
        "recipient": mix.name,
        "recipient_public": mix.round_public.hex(),
        "ephemeral_secret": ephemeral_secret.hex(),
        "ephemeral_public": ephemeral_public.hex(),
        "shared_secret": shared.hex(),
        "kdf_input": (shared + ephemeral_public + mix.round_public).hex(),
        "key": key.hex(),
        "nonce": nonce.hex(),
        "associated_data": ad.hex(),
        "plaintext": inner.hex(),
        "ciphertext": ciphertext.hex(),
        "layer": layer.hex(),
    }


def build_inner_onion(
    client: str, index: int, payload: bytes, mixes: Sequence[Mix]
) -> dict[str, Any]:
    """One inner onion: ``payload`` wrapped for hops ``1 .. L-1``, innermost first."""
    layers: list[dict[str, Any]] = []
    inner = payload
    for mix in reversed(mixes[1:]):
        layer = build_layer(f"{client}/{index}/{mix.hop}", inner, mix)
        layers.append(layer)
        inner = bytes.fromhex(layer["layer"])
    layers.reverse()
    assert len(inner) == onion_length(len(payload), len(mixes) - 1)
    return {"index": index, "payload": payload.hex(), "onion": inner.hex(), "layers": layers}


def build_submission(
    client: str,
    payloads: Sequence[bytes],
    mixes: Sequence[Mix],
    *,
    chain_id: str = CHAIN_ID,
    round_id: int = ROUND,
) -> dict[str, Any]:
    """A client's submission box (docs/wire.md § 9.3): one layer for hop 0 around the
    concatenation of the inner onions (with one mix: of the payloads)."""
    if len(mixes) > 1:
        inner_onions = [build_inner_onion(client, i, p, mixes) for i, p in enumerate(payloads)]
        items = [bytes.fromhex(o["onion"]) for o in inner_onions]
    else:
        inner_onions = []
        items = list(payloads)
    box_layer = build_layer(
        f"{client}/box", b"".join(items), mixes[0], chain_id=chain_id, round_id=round_id
    )
    box = bytes.fromhex(box_layer["layer"])
    width = len(payloads[0])
    assert len(box) == submission_length(width, len(mixes), len(payloads))
    assert len(box) == LAYER_OVERHEAD + len(payloads) * (width + LAYER_OVERHEAD * (len(mixes) - 1))
    # the entry mix opens the box and cuts it into the items
    opened = peel_many(
        [box], PrivateKey(mixes[0].round_secret), chain_id=chain_id, round_id=round_id,
        hop_index=0, expected_length=len(box), split=len(payloads),
    )  # fmt: skip
    assert opened == items
    digest = hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").digest()
    assert digest == submission_digest(box)
    vector: dict[str, Any] = {
        "client": client,
        "payloads": [p.hex() for p in payloads],
    }
    if inner_onions:
        vector["inner_onions"] = inner_onions
    vector.update(
        {
            "box_layer": box_layer,
            "box": box.hex(),
            "length": len(box),
            "submission_digest": digest.hex(),
            "items": [i.hex() for i in items],
        }
    )
    if len(mixes) > 1:
        vector["item_digests"] = [item_digest(i).hex() for i in items]
        assert all(hashlib.blake2b(i, digest_size=16).digest() == item_digest(i) for i in items)
    return vector


def inner_onion(submission: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    onion: Mapping[str, Any] = submission["inner_onions"][index]
    assert onion["index"] == index
    return onion


def layer_item(submission: Mapping[str, Any], index: int, hop: int) -> bytes:
    """The item mix ``hop >= 1`` receives for inner onion ``index`` of ``submission``."""
    return bytes.fromhex(inner_onion(submission, index)["layers"][hop - 1]["layer"])


def opening_case(
    what: str, layer: bytes, mix: Mix, *, chain_id: str, round_id: int, hop: int
) -> dict[str, Any]:
    """Mix ``mix`` peels ``layer`` as if it were at ``(chain_id, round_id, hop)``."""
    result = try_open(layer, mix.round_secret, chain_id=chain_id, round_id=round_id, hop=hop)
    case: dict[str, Any] = {
        "item": what,
        "layer": layer.hex(),
        "key_of": mix.name,
        "chain_id": chain_id,
        "round": round_id,
        "hop": hop,
        "associated_data": spec_binding(chain_id, round_id, hop).hex(),
    }
    if isinstance(result, bytes):
        case["result"] = "ok"
        case["inner"] = result.hex()
    else:
        assert isinstance(result, DecryptionFailed), result
        case["result"] = result.code
    return case


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
    key, nonce = spec_kdf(secret, item[:32], mix.round_public)
    ad = spec_binding(CHAIN_ID, ROUND, mix.hop)
    try:
        inner = bytes(bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[32:], ad, nonce, key))
    except CryptoError:
        raise AssertionError("a traced layer must open with its revealed secret") from None
    step = Step(mix.hop, item, secret, proof)
    return step, {
        "hop": mix.hop,
        "node": mix.name,
        "item": item.hex(),
        "ephemeral_public": item[:32].hex(),
        "shared_secret": secret.hex(),
        "context": context.hex(),
        "proof": proof.hex(),
        "key": key.hex(),
        "nonce": nonce.hex(),
        "associated_data": ad.hex(),
        "inner": inner.hex(),
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
    carol_payloads = [
        encode_share(fixed_below(f"share/carol/{i}", MODULUS), MODULUS) for i in range(MESSAGES)
    ]
    valid = payload_validator(protocol)
    assert all(valid(p) for p in alice_payloads + carol_payloads) and not valid(BAD_PAYLOAD)

    # -- submissions: one box per client, each holding m inner onions
    alice = build_submission("alice", alice_payloads, mixes)
    mallory = build_submission("mallory", mallory_payloads, mixes)
    submissions = {"alice": alice, "mallory": mallory}
    alice_box = bytes.fromhex(alice["box"])

    # -- a chain of one mix: the box holds the payloads
    solo = Mix(0, SOLO_MIX, SOLO_CHAIN_ID, SOLO_ROUND)
    carol = build_submission(
        "carol", carol_payloads, [solo], chain_id=SOLO_CHAIN_ID, round_id=SOLO_ROUND
    )
    assert carol["items"] == [p.hex() for p in carol_payloads]

    # -- a wrongly bound layer: made with mix2's key but bound to hop 2; and a correct
    #    hop-1 item opened under other bindings. Every wrong binding fails like a wrong key.
    misbound = build_layer(
        "mallory/misbound/1", mallory_payloads[0] + bytes(LAYER_OVERHEAD), mixes[1],
        bound_hop=2,
    )  # fmt: skip
    misbound_item = bytes.fromhex(misbound["layer"])
    assert len(misbound_item) == onion_length(width, hops - 1)
    good_item = layer_item(alice, 0, 1)
    other_round_layer = build_layer(
        "alice/other-round/0", mallory_payloads[0], mixes[0], round_id=ROUND + 1
    )
    openings = [
        opening_case("alice-1", good_item, mixes[1], chain_id=CHAIN_ID, round_id=ROUND, hop=1),
        opening_case("alice-1", good_item, mixes[1], chain_id=CHAIN_ID, round_id=ROUND + 1, hop=1),
        opening_case("alice-1", good_item, mixes[1], chain_id="vectors2", round_id=ROUND, hop=1),
        opening_case("alice-1", good_item, mixes[1], chain_id=CHAIN_ID, round_id=ROUND, hop=2),
        opening_case("alice-1", good_item, mixes[2], chain_id=CHAIN_ID, round_id=ROUND, hop=1),
        opening_case("misbound", misbound_item, mixes[1], chain_id=CHAIN_ID, round_id=ROUND, hop=1),
        opening_case("misbound", misbound_item, mixes[1], chain_id=CHAIN_ID, round_id=ROUND, hop=2),
        opening_case(
            "alice-box", alice_box, mixes[0], chain_id=CHAIN_ID, round_id=ROUND, hop=1
        ),
        opening_case(
            "other-round", bytes.fromhex(other_round_layer["layer"]), mixes[0],
            chain_id=CHAIN_ID, round_id=ROUND, hop=0,
        ),
    ]  # fmt: skip
    assert [c["result"] for c in openings] == [
        "ok", *["decryption-failed"] * 4, "decryption-failed", "ok", "decryption-failed",
        "decryption-failed",
    ]  # fmt: skip

    # -- the trace: mallory's inner onion 2 holds a payload >= N
    stored_steps: list[Mapping[str, Any]] = []
    if previous is not None:
        stored_steps = list(previous.get("trace", {}).get("steps", []))
    steps: list[Step] = []
    step_vectors: list[dict[str, Any]] = []
    for hop in (1, 2):
        item = layer_item(mallory, 2, hop)
        stored = next(
            (s for s in stored_steps if s["hop"] == hop and s["item"] == item.hex()), None
        )
        step, vector = make_step(mixes[hop], item, stored, fresh_proofs)
        steps.append(step)
        step_vectors.append(vector)
    assert step_vectors[0]["inner"] == step_vectors[1]["item"]
    assert step_vectors[1]["inner"] == BAD_PAYLOAD.hex()
    accusation = Accusation(Failure.INVALID_PAYLOAD, tuple(steps))
    last_only = Accusation(Failure.INVALID_PAYLOAD, (steps[1],))
    keys = {mix.hop: mix.round_public for mix in mixes}
    verify_accusation(
        accusation, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=hops, validator=valid
    )

    # -- admission: a credentialed client with an issuer's token signs alice's box
    client_key = SigningKey(fixed("admission/client"))
    issuer_key = SigningKey(fixed("admission/issuer"))
    credential = bytes(client_key.verify_key)
    admitted_id = credential_client_id(credential)
    token = issue_token(
        issuer_key, chain_id=CHAIN_ID, credential=credential, expires=ADMISSION_EXPIRES
    )
    token_signed = (
        prefixed(b"mixnet/admission-token/v1")
        + prefixed(CHAIN_ID.encode())
        + prefixed(credential)
        + struct.pack(">Q", ADMISSION_EXPIRES)
    )
    assert token_signed == token_message(CHAIN_ID, credential, ADMISSION_EXPIRES)
    assert token == issuer_key.sign(token_signed).signature + struct.pack(">Q", ADMISSION_EXPIRES)
    verify_token(
        issuer_key.verify_key, token, chain_id=CHAIN_ID, credential=credential, now=DEADLINE
    )
    alice_digest = submission_digest(alice_box)
    submission_signed = (
        prefixed(b"mixnet/submission/v1")
        + prefixed(CHAIN_ID.encode())
        + struct.pack(">Q", ROUND)
        + prefixed(alice_digest)
    )
    assert submission_signed == submission_message(CHAIN_ID, ROUND, alice_digest)
    submission_signature = sign_submission(
        client_key, chain_id=CHAIN_ID, round_id=ROUND, digest=alice_digest
    )
    assert submission_signature == client_key.sign(submission_signed).signature
    verify_submission(
        credential, submission_signature, chain_id=CHAIN_ID, round_id=ROUND, digest=alice_digest
    )

    # -- frames
    announcements = tuple(mix.announcement for mix in mixes)
    hop1_items = [layer_item(submissions[c], i, 1) for c, i in MIX1_ORDER]
    mallory_hop1 = [layer_item(mallory, i, 1) for i in range(MESSAGES)]
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
            "submit", "client", m1, "request", to_wire(Submit(ROUND, "alice", alice_box))
        ),
        frame_vector("accepted", m1, "client", "reply", to_wire(Accepted(ROUND, "alice"))),
        frame_vector(
            "error", m1, "client", "error",
            error_frame(DuplicateClient(f"client 'alice' already submitted in round {ROUND}")),
        ),
        frame_vector(
            "submit (with admission)", "client", m1, "request",
            to_wire(
                Submit(
                    ROUND, admitted_id, alice_box, credential=credential, token=token,
                    signature=submission_signature,
                )
            ),
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
            "Known-answer vectors of the cloaknet wire format, wire version 2 (docs/wire.md). "
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
            "layer_overhead": LAYER_OVERHEAD,
            "submission_length": submission_length(width, hops, MESSAGES),
            "inner_onion_length": onion_length(width, hops - 1),
            "item_lengths": [submission_length(width, hops, MESSAGES)]
            + [onion_length(width, hops - hop) for hop in range(1, hops + 1)],
        },
        "key_file": {
            "name": mixes[0].name,
            "seed": bytes(mixes[0].identity).hex(),
            "public_key_text": public_key_text(mixes[0].identity.verify_key),
            "text": key_text,
        },
        "binding_data": binding,
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
        "submissions": [alice, mallory],
        "one_mix": {
            "chain_id": SOLO_CHAIN_ID,
            "round": SOLO_ROUND,
            "mix": solo.describe(),
            "messages": MESSAGES,
            "payload_length": width,
            "submission_length": submission_length(width, 1, MESSAGES),
            "submission": carol,
        },
        "wrong_binding": {
            "misbound_layer": misbound,
            "openings": openings,
        },
        "trace": {
            "accused": {"client": "mallory", "index": 2},
            "failure": Failure.INVALID_PAYLOAD.value,
            "validator": {"width": width, "modulus": str(MODULUS)},
            "steps": step_vectors,
        },
        "admission": {
            "chain_id": CHAIN_ID,
            "round": ROUND,
            "client_seed": bytes(client_key).hex(),
            "credential": credential.hex(),
            "client": admitted_id,
            "issuer_seed": bytes(issuer_key).hex(),
            "issuer_public": bytes(issuer_key.verify_key).hex(),
            "expires": ADMISSION_EXPIRES,
            "token_signed_bytes": token_signed.hex(),
            "token": token.hex(),
            "box": alice["box"],
            "submission_digest": alice_digest.hex(),
            "submission_signed_bytes": submission_signed.hex(),
            "signature": submission_signature.hex(),
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
