"""Regenerate the wire format's known-answer vectors, ``tests/mixnet/wire_vectors.json``.

The vectors belong to ``docs/wire.md`` (wire version 2). Every input is fixed: keys, seeds and
the layers' ephemeral secrets are BLAKE2b digests of labels, so running this script again
gives the same bytes. The one exception is the Chaum–Pedersen proofs of the trace steps, which are
randomized: a proof stored in the existing file is kept as long as it still verifies (so the
file is byte-stable), and ``--fresh-proofs`` makes new ones. The ownership proofs of the
``proven`` chain are deterministic here: their nonces come from fixed 64-byte strings, and
:mod:`mixnet.ownership` is run with those bytes in place of ``os.urandom`` to check that it
makes the same proofs.

    .venv/bin/python scripts/wire_vectors.py            # rewrite the file
    .venv/bin/python scripts/wire_vectors.py --check    # exit 1 if the code makes other bytes

Every layer is built here from the specification's construction (X25519, BLAKE2b-352 with
personalisation ``mixnet-layer-v2``, ChaCha20-Poly1305-IETF with the binding data as
associated data) with a fixed ephemeral secret, and checked against the code
(:func:`mixnet.onion.layer_key`, :func:`mixnet.onion.binding_data`,
:func:`mixnet.onion.peel_many`, :func:`mixnet.onion.submission_length`, ...) before it is
written. The layers of the ``proven`` chain (``[chain] ownership_proofs = true``) are built the
same way with the ownership proof of docs/wire.md § 9.6 (clamping, the witness sign choice,
``c = BLAKE2b-128["mixnet-owner-v2"](...)``, ``s = r + c·x mod ℓ``) and checked against
:func:`mixnet.ownership.verify_ownership`, :func:`mixnet.onion.wrap` and
:func:`mixnet.onion.peel_many` with ``proven=True``. The ``signed_chunks`` section (docs/wire.md
§ 8.5, § 13.3, § 13.4) is built from the specification's Merkle tree (RFC 6962 with
BLAKE2b-256) and signed message, with the mixes' fixed identity keys (Ed25519 is
deterministic), and checked against :mod:`mixnet.chunk_signature` and the judge of a blame,
:func:`mixnet.core.deliveries.judge`; the Chaum–Pedersen proof of its blame step is kept like
the trace's.

Run it deliberately: the tests (``tests/mixnet/test_wire_vectors.py``,
``tests/cloaknet/test_wire_vectors_cloaknet.py`` and ``tests/integration/test_spec_client.py``)
check the code against the stored file, so an encoding that changes breaks them until the
change is accepted — which for anything a peer sees means bumping the wire version
(``docs/wire.md``, "Versioning").
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import struct
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey

from cloaknet.analyzer_node import AnalyzerApp
from cloaknet.encoding import encode_share, quantize, split
from cloaknet.noise import noise_p, truncated_laplace_pmf
from cloaknet.params import share_width
from cloaknet.protocol_table import read_protocol_table
from cloaknet.protocols import CloakProtocol
from cloaknet.validator import payload_validator
from mixnet import ownership
from mixnet.accusation_wire import accusation_to_wire, page_proof_to_wire
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
    delivered_by,
    failure_of,
    open_layer,
    owned,
    prove_failure,
    step_context,
    verify_accusation,
)
from mixnet.chain import RoundPolicy
from mixnet.chunk_signature import (
    Delivery,
    chunk_message,
    chunk_root,
    delivery_of,
    inclusion_path,
    leaf_hash,
    path_root,
    sign_chunk,
    verify_chunk,
    verify_delivery,
)
from mixnet.core.actions import DeliveredBatch
from mixnet.core.deliveries import ChunkSigning, judge
from mixnet.core.intake import item_digest, submission_digest
from mixnet.dleq import InvalidProof, prove_shared_secret, verify_shared_secret
from mixnet.errors import BadLength, DecryptionFailed, DuplicateClient, MixnetError
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
    PROVEN_LAYER_OVERHEAD,
    binding_data,
    layer_key,
    onion_length,
    peel_many,
    split_layer,
    submission_length,
    wrap,
)
from mixnet.ownership import ciphertext_digest, new_ephemeral, prove_ownership, verify_ownership
from mixnet.submit_many import receipts_frame, submit_many_frame
from mixnet.trace_signature import (
    PageProof,
    accusation_bytes,
    page_proof,
    sign_page,
    sign_refusal,
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
#: The order in which mix2 forwards the hop-2 items (client, onion index): its permutation.
MIX2_ORDER = (
    ("mallory", 1), ("alice", 3), ("mallory", 2), ("alice", 0),
    ("alice", 2), ("mallory", 0), ("alice", 1), ("mallory", 3),
)  # fmt: skip
#: The order in which mix3 hands alice's payloads to the analyzer.
MIX3_ORDER = (3, 0, 2, 1)
#: The one-mix chain of the ``one_mix`` vector.
SOLO_CHAIN_ID = "vectors-solo"
SOLO_ROUND = 3
SOLO_MIX = "solo"
#: The admission vector: a credentialed client admitted by the issuer's token.
ADMISSION_EXPIRES = 1798761600  # 2027-01-01T00:00:00Z

#: The chain with ownership proofs of the ``proven`` vector (docs/wire.md § 9.5, § 9.6).
PROVEN_CHAIN_ID = "vectors-proven"
PROVEN_ROUND = 11

#: The layer key derivation and binding data, restated from docs/wire.md § 9 (not imported).
KDF_PERSON = b"mixnet-layer-v2"
BINDING_DOMAIN = b"mixnet/onion-layer/v2"
#: The ownership proof's challenge personalisation and curve constants (docs/wire.md § 9.6).
OWNER_PERSON = b"mixnet-owner-v2"
FIELD_PRIME = 2**255 - 19
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493
PROOF_BYTES = 48
#: Signed chunks (docs/wire.md § 8.5): the signed message's domain; the round of the
#: ``signed_chunks.blame`` vector, in which mix2 sends its batch in chunks of 3 items.
CHUNK_DOMAIN = b"mixnet/chunk/v1"
#: The items of the ``signed_chunks.trees`` vectors (of different lengths; the trees of
#: 0 to 7 of them).
TREE_ITEMS = tuple(
    hashlib.blake2b(f"wire-vectors/merkle/{i}".encode(), digest_size=3 + i).digest()
    for i in range(7)
)
BLAME_ROUND = 9
BLAME_CHUNK_SIZE = 3

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
    layer: bytes, secret: bytes, *, chain_id: str, round_id: int, hop: int, proven: bool = False
) -> bytes | MixnetError:
    """The code's peel of one layer (``peel_many``), as the mix at ``hop`` does it."""
    [result] = peel_many(
        [layer], PrivateKey(secret), chain_id=chain_id, round_id=round_id, hop_index=hop,
        expected_length=len(layer), proven=proven,
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


# --------------------------------------------------------------------------- ownership proofs


@contextlib.contextmanager
def fixed_urandom(*chunks: bytes) -> Iterator[None]:
    """Run :mod:`mixnet.ownership` with ``chunks`` (in order, each of the length asked for)
    in place of ``os.urandom``: the code then makes the vector's keys and proofs."""
    queue = list(chunks)

    def urandom(size: int) -> bytes:
        chunk = queue.pop(0)
        assert len(chunk) == size, (len(chunk), size)
        return chunk

    saved = vars(ownership)["os"]
    setattr(ownership, "os", SimpleNamespace(urandom=urandom))  # noqa: B010
    try:
        yield
    finally:
        setattr(ownership, "os", saved)  # noqa: B010
    assert not queue, "not every fixed random string was used"


def scalar(value: int) -> bytes:
    return value.to_bytes(32, "little")


def lift_0(u_bytes: bytes) -> bytes:
    """docs/wire.md § 13.2: the Edwards point over ``u`` with sign bit 0 (``u`` canonical)."""
    u = int.from_bytes(u_bytes, "little")
    assert u < FIELD_PRIME - 1
    return scalar((u - 1) * pow(u + 1, -1, FIELD_PRIME) % FIELD_PRIME)


def spec_owner_key(e: bytes) -> dict[str, Any]:
    """docs/wire.md § 9.6 "Key": ``e' = clamp(e)``, ``x₀ = e' mod ℓ``, ``P₀ = x₀·B``,
    ``E = u(P₀)``; the witness ``x`` is ``x₀`` if ``P₀``'s sign bit is 0, else ``ℓ − x₀``."""
    clamped = bytearray(e)
    clamped[0] &= 248
    clamped[31] &= 127
    clamped[31] |= 64
    x0 = int.from_bytes(clamped, "little") % GROUP_ORDER
    point = bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(scalar(x0)))
    sign = point[31] >> 7
    y = int.from_bytes(point, "little") & ((1 << 255) - 1)
    public = scalar((1 + y) * pow(1 - y, -1, FIELD_PRIME) % FIELD_PRIME)
    assert public == bytes(bindings.crypto_scalarmult_base(e))  # E = X25519(e, 9)
    witness = x0 if sign == 0 else GROUP_ORDER - x0
    lifted = lift_0(public)
    assert bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(scalar(witness))) == lifted
    return {
        "ephemeral_secret": e,
        "clamped_secret": bytes(clamped),
        "scalar": scalar(x0),
        "scalar_point": point,
        "sign_bit": sign,
        "witness": scalar(witness),
        "ephemeral_public": public,
        "lifted_public": lifted,
    }


def spec_challenge_input(context: bytes, public: bytes, commitment: bytes, digest: bytes) -> bytes:
    """docs/wire.md § 9.6: ``u32be(len(ctx)) || ctx || E || R || h``."""
    return u32(len(context)) + context + public + commitment + digest


def spec_challenge(message: bytes) -> bytes:
    """docs/wire.md § 9.6: ``BLAKE2b-128["mixnet-owner-v2"]`` of the challenge input."""
    return hashlib.blake2b(message, digest_size=16, person=OWNER_PERSON).digest()


def spec_verify_ownership(public: bytes, proof: bytes, digest: bytes, context: bytes) -> bool:
    """docs/wire.md § 9.6 "Verification", restated (the code's verdict is compared to it)."""
    if len(public) != 32 or len(proof) != PROOF_BYTES or len(digest) != 32:
        return False
    c, s = proof[:16], int.from_bytes(proof[16:], "little")
    u = int.from_bytes(public, "little")
    if not any(c) or not 0 < s < GROUP_ORDER or u >= FIELD_PRIME - 1:
        return False
    point = lift_0(public)
    if not bindings.crypto_core_ed25519_is_valid_point(point):
        return False
    commitment = bindings.crypto_core_ed25519_sub(
        bindings.crypto_scalarmult_ed25519_base_noclamp(scalar(s)),
        bindings.crypto_scalarmult_ed25519_noclamp(c + bytes(16), point),
    )
    return spec_challenge(spec_challenge_input(context, public, commitment, digest)) == c


#: The fields of an ownership key and of an ownership proof in a layer vector, in order.
OWNER_KEY_FIELDS = (
    "ephemeral_secret", "clamped_secret", "scalar", "scalar_point", "sign_bit", "witness",
    "ephemeral_public", "lifted_public",
)  # fmt: skip
OWNER_PROOF_FIELDS = (
    "ciphertext_digest", "proof_random", "r", "commitment", "challenge_input", "challenge",
    "response", "proof",
)  # fmt: skip


def ownership_vector(
    label: str, e: bytes, ciphertext: bytes, context: bytes
) -> tuple[bytes, dict[str, Any]]:
    """The ownership proof (docs/wire.md § 9.6) of a layer with ephemeral secret ``e``,
    AEAD ciphertext ``ciphertext`` and binding ``context``, with the fixed nonce of
    ``label``; checked against :mod:`mixnet.ownership` run on the same random bytes."""
    key = spec_owner_key(e)
    public, witness = key["ephemeral_public"], int.from_bytes(key["witness"], "little")
    digest = hashlib.blake2b(ciphertext, digest_size=32).digest()
    assert digest == ciphertext_digest(ciphertext)
    random_bytes = fixed(f"owner-nonce/{label}", 64)
    r = int.from_bytes(random_bytes, "little") % GROUP_ORDER
    assert scalar(r) == bindings.crypto_core_ed25519_scalar_reduce(random_bytes) and r != 0
    commitment = bytes(bindings.crypto_scalarmult_ed25519_base_noclamp(scalar(r)))
    message = spec_challenge_input(context, public, commitment, digest)
    c = spec_challenge(message)
    assert any(c)  # the prover would draw again
    s = (r + int.from_bytes(c, "little") * witness) % GROUP_ORDER
    assert s != 0
    proof = c + scalar(s)
    # the code makes the same key and proof from the same random bytes
    with fixed_urandom(e, random_bytes):
        made = new_ephemeral()
        assert (made.secret, made.public, made.witness) == (e, public, key["witness"])
        assert prove_ownership(made, digest, context) == proof
    assert verify_ownership(public, proof, digest, context)
    assert spec_verify_ownership(public, proof, digest, context)
    # bound to the ciphertext, the binding and E
    assert not verify_ownership(public, proof, ciphertext_digest(ciphertext + b"\x00"), context)
    assert not verify_ownership(public, proof, digest, context + b"\x00")
    tampered = proof[:20] + bytes([proof[20] ^ 1]) + proof[21:]
    assert not verify_ownership(public, tampered, digest, context)
    assert not spec_verify_ownership(public, tampered, digest, context)
    vector = {name: value.hex() if isinstance(value, bytes) else value
              for name, value in key.items()}  # fmt: skip
    vector.update(
        {
            "ciphertext_digest": digest.hex(),
            "proof_random": random_bytes.hex(),
            "r": scalar(r).hex(),
            "commitment": commitment.hex(),
            "challenge_input": message.hex(),
            "challenge": c.hex(),
            "response": scalar(s).hex(),
            "proof": proof.hex(),
        }
    )
    return proof, vector


def build_proven_layer(
    label: str, inner: bytes, mix: Mix, *, chain_id: str, round_id: int
) -> dict[str, Any]:
    """One layer with an ownership proof (docs/wire.md § 9.5) around ``inner`` for ``mix``
    (hop ``>= 1``) with the fixed ephemeral secret and proof nonce of ``label``."""
    hop = mix.hop
    assert hop >= 1
    ephemeral_secret = fixed(f"ephemeral/{label}")
    ephemeral_public = bytes(bindings.crypto_scalarmult_base(ephemeral_secret))
    shared = bytes(bindings.crypto_scalarmult(ephemeral_secret, mix.round_public))
    assert bytes(bindings.crypto_scalarmult(mix.round_secret, ephemeral_public)) == shared
    key, nonce = spec_kdf(shared, ephemeral_public, mix.round_public)
    ad = spec_binding(chain_id, round_id, hop)
    ciphertext = bytes(bindings.crypto_aead_chacha20poly1305_ietf_encrypt(inner, ad, nonce, key))
    proof, owner = ownership_vector(label, ephemeral_secret, ciphertext, ad)
    assert owner["ephemeral_public"] == ephemeral_public.hex()
    layer = ephemeral_public + proof + ciphertext
    assert len(layer) == len(inner) + PROVEN_LAYER_OVERHEAD == len(inner) + 96
    assert split_layer(layer, proven=True) == (ephemeral_public, proof, ciphertext)
    # the code wraps the same layer from the same random bytes
    with fixed_urandom(ephemeral_secret, bytes.fromhex(owner["proof_random"])):
        made = wrap(
            inner, [mix.round_public], chain_id=chain_id, round_id=round_id, first_hop=hop,
            proven=True,
        )  # fmt: skip
    assert made == layer
    assert owned(layer, chain_id=chain_id, round_id=round_id, hop=hop)
    # the mix peels it (skipping the proof); anyone with S opens it
    opened = try_open(
        layer, mix.round_secret, chain_id=chain_id, round_id=round_id, hop=hop, proven=True
    )
    assert opened == inner
    assert isinstance(
        try_open(layer, mix.round_secret, chain_id=chain_id, round_id=round_id, hop=hop),
        DecryptionFailed,
    )  # read without the proof, it does not authenticate
    revealed = open_layer(
        layer, shared, mix.round_public, chain_id=chain_id, round_id=round_id, hop=hop,
        proven=True,
    )  # fmt: skip
    assert revealed == inner
    vector: dict[str, Any] = {
        "hop": hop,
        "recipient": mix.name,
        "recipient_public": mix.round_public.hex(),
    }
    vector.update((name, owner[name]) for name in OWNER_KEY_FIELDS)
    vector.update(
        {
            "shared_secret": shared.hex(),
            "kdf_input": (shared + ephemeral_public + mix.round_public).hex(),
            "key": key.hex(),
            "nonce": nonce.hex(),
            "associated_data": ad.hex(),
            "plaintext": inner.hex(),
            "ciphertext": ciphertext.hex(),
        }
    )
    vector.update((name, owner[name]) for name in OWNER_PROOF_FIELDS)
    vector["layer"] = layer.hex()
    return vector


def build_proven_onion(
    label: str, payload: bytes, mixes: Sequence[Mix], *, chain_id: str, round_id: int
) -> list[dict[str, Any]]:
    """``payload`` wrapped for hops ``len(mixes) - 1 .. 1`` with proofs; the layers in hop
    order (the first is the onion)."""
    layers: list[dict[str, Any]] = []
    inner = payload
    for mix in reversed(mixes[1:]):
        layer = build_proven_layer(
            f"{label}/{mix.hop}", inner, mix, chain_id=chain_id, round_id=round_id
        )
        layers.append(layer)
        inner = bytes.fromhex(layer["layer"])
    layers.reverse()
    return layers


def build_proven_box(
    client: str, onions: Sequence[dict[str, Any]], mixes: Sequence[Mix], width: int
) -> dict[str, Any]:
    """A submission box on the proven chain around the given inner onions (each a dict with
    ``index`` and ``onion``): the entry layer is an ordinary one (docs/wire.md § 9.5)."""
    items = [bytes.fromhex(o["onion"]) for o in onions]
    box_layer = build_layer(
        f"{client}/box", b"".join(items), mixes[0], chain_id=PROVEN_CHAIN_ID,
        round_id=PROVEN_ROUND,
    )  # fmt: skip
    box = bytes.fromhex(box_layer["layer"])
    hops = len(mixes)
    assert len(box) == submission_length(width, hops, len(items), proven=True)
    assert len(box) == 48 + len(items) * (width + 96 * (hops - 1))
    opened = peel_many(
        [box], PrivateKey(mixes[0].round_secret), chain_id=PROVEN_CHAIN_ID,
        round_id=PROVEN_ROUND, hop_index=0, expected_length=len(box), split=len(items),
    )  # fmt: skip
    assert opened == items
    digest = hashlib.blake2b(box, digest_size=32, person=b"mixnet-submit").digest()
    assert digest == submission_digest(box)
    return {
        "client": client,
        "inner_onions": list(onions),
        "box_layer": box_layer,
        "box": box.hex(),
        "length": len(box),
        "submission_digest": digest.hex(),
        "items": [i.hex() for i in items],
        "item_digests": [item_digest(i).hex() for i in items],
    }


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
    mix: Mix,
    item: bytes,
    stored: Mapping[str, Any] | None,
    fresh: bool,
    *,
    chain_id: str = CHAIN_ID,
    round_id: int = ROUND,
    proven: bool = False,
) -> tuple[Step, dict[str, Any]]:
    """Mix ``mix``'s step about ``item``: a stored proof if it still verifies, else a new one.
    On the ``proven`` chain the layer's ciphertext follows its ownership proof, and the step
    may be about a layer that does not open (an ``undecryptable`` accusation)."""
    context = step_context(chain_id=chain_id, round_id=round_id, hop=mix.hop, item=item)
    manual = (
        prefixed(b"mixnet/blame-step/v1")
        + prefixed(chain_id.encode())
        + struct.pack(">QH", round_id, mix.hop)
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
    ad = spec_binding(chain_id, round_id, mix.hop)
    offset = 32 + (PROOF_BYTES if proven else 0)
    inner: bytes | None
    try:
        inner = bytes(
            bindings.crypto_aead_chacha20poly1305_ietf_decrypt(item[offset:], ad, nonce, key)
        )
    except CryptoError:
        inner = None
    if inner is None and not proven:
        raise AssertionError("a traced layer must open with its revealed secret")
    step = Step(mix.hop, item, secret, proof)
    vector: dict[str, Any] = {
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
    }
    if proven:
        vector["ownership_proof"] = item[32:offset].hex()
        vector["ciphertext"] = item[offset:].hex()
        vector["owned"] = owned(item, chain_id=chain_id, round_id=round_id, hop=mix.hop)
        vector["opens"] = inner is not None
    if inner is not None:
        vector["inner"] = inner.hex()
    return step, vector


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


# --------------------------------------------------------------------------- signed chunks


def spec_hash(data: bytes) -> bytes:
    """docs/wire.md § 8.5: ``BLAKE2b-256`` (no key, no personalisation)."""
    return hashlib.blake2b(data, digest_size=32).digest()


def spec_leaf(item: bytes) -> bytes:
    """docs/wire.md § 8.5: a leaf hash, ``H(0x00 || item)``."""
    return spec_hash(b"\x00" + item)


def spec_split(n: int) -> int:
    """docs/wire.md § 8.5: the largest power of two strictly below ``n >= 2``."""
    k = 1
    while 2 * k < n:
        k *= 2
    return k


def spec_tree_root(leaves: Sequence[bytes]) -> bytes:
    """docs/wire.md § 8.5 ``MTH``: over leaf hashes; ``H("")`` for none."""
    if not leaves:
        return spec_hash(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = spec_split(len(leaves))
    return spec_hash(b"\x01" + spec_tree_root(leaves[:k]) + spec_tree_root(leaves[k:]))


def spec_audit_path(position: int, leaves: Sequence[bytes]) -> list[bytes]:
    """docs/wire.md § 8.5 ``PATH``: the sibling nearest the leaf first."""
    if len(leaves) <= 1:
        return []
    k = spec_split(len(leaves))
    if position < k:
        return [*spec_audit_path(position, leaves[:k]), spec_tree_root(leaves[k:])]
    return [*spec_audit_path(position - k, leaves[k:]), spec_tree_root(leaves[:k])]


def spec_root_from_path(
    item: bytes, position: int, count: int, path: Sequence[bytes]
) -> bytes | None:
    """docs/wire.md § 8.5 "Checking a path": the root ``path`` proves, or ``None``."""
    if not 0 <= position < count:
        return None
    right: list[bool] = []  # from the root down: is the sibling on the right?
    n, m = count, position
    while n > 1:
        k = spec_split(n)
        if m < k:
            right.append(True)
            n = k
        else:
            right.append(False)
            m, n = m - k, n - k
    if len(path) != len(right) or any(len(p) != 32 for p in path):
        return None
    node = spec_leaf(item)
    for sibling, on_right in zip(path, reversed(right), strict=True):
        node = spec_hash(b"\x01" + (node + sibling if on_right else sibling + node))
    return node


def spec_chunk_message(
    chain_id: str, round_id: int, sender: str, index: int, count: int, root: bytes
) -> bytes:
    """docs/wire.md § 8.5: ``lp("mixnet/chunk/v1") || lp(utf8(chain_id)) || u64be(round) ||
    lp(utf8(sender)) || u32be(index) || u32be(count) || root``."""
    return (
        prefixed(CHUNK_DOMAIN)
        + prefixed(chain_id.encode())
        + struct.pack(">Q", round_id)
        + prefixed(sender.encode())
        + struct.pack(">II", index, count)
        + root
    )


def tree_vector(items: Sequence[bytes]) -> dict[str, Any]:
    """The Merkle tree of ``items`` (docs/wire.md § 8.5), checked against the code."""
    leaves = [spec_leaf(item) for item in items]
    root = spec_tree_root(leaves)
    assert root == chunk_root(items)
    assert [leaf_hash(item) for item in items] == leaves
    paths = [spec_audit_path(m, leaves) for m in range(len(items))]
    for m, (item, path) in enumerate(zip(items, paths, strict=True)):
        assert tuple(path) == inclusion_path(items, m)
        assert spec_root_from_path(item, m, len(items), path) == root
        assert path_root(item, m, len(items), path) == root
        # a path proves its item at its position only
        assert path_root(item + b"\x00", m, len(items), path) != root
        if len(items) > 1:
            other = (m + 1) % len(items)
            assert spec_root_from_path(item, other, len(items), path) != root
            assert path_root(item, other, len(items), path) != root
    return {
        "items": [item.hex() for item in items],
        "leaf_hashes": [leaf.hex() for leaf in leaves],
        "root": root.hex(),
        "paths": [[p.hex() for p in path] for path in paths],
    }


def chunk_vector(
    mix: Mix, items: Sequence[bytes], *, chain_id: str, round_id: int, index: int, frame: str
) -> dict[str, Any]:
    """``mix``'s signed chunk ``index`` holding ``items`` (docs/wire.md § 8.5): the tree, the
    signed bytes and the signature, checked against :mod:`mixnet.chunk_signature`."""
    tree = tree_vector(items)
    root = bytes.fromhex(tree["root"])
    message = spec_chunk_message(chain_id, round_id, mix.name, index, len(items), root)
    assert message == chunk_message(
        chain_id=chain_id, round_id=round_id, sender=mix.name, index=index, count=len(items),
        root=root,
    )  # fmt: skip
    signature = bytes(mix.identity.sign(message).signature)
    assert signature == sign_chunk(
        mix.identity, chain_id=chain_id, round_id=round_id, sender=mix.name, index=index,
        items=items,
    )  # fmt: skip
    key = mix.identity.verify_key
    assert verify_chunk(key, signature, chain_id=chain_id, round_id=round_id, sender=mix.name,
                        index=index, items=items)  # fmt: skip
    for wrong in (
        {"index": index + 1, "items": items},
        {"index": index, "items": items[:-1]},
        {"index": index, "items": [*items[1:], items[0]]},
    ):
        assert not verify_chunk(key, signature, chain_id=chain_id, round_id=round_id,
                                sender=mix.name, **wrong)  # type: ignore[arg-type]  # fmt: skip
    assert not verify_chunk(key, signature, chain_id=chain_id, round_id=round_id + 1,
                            sender=mix.name, index=index, items=items)  # fmt: skip
    return {
        "frame": frame,
        "chain_id": chain_id,
        "round": round_id,
        "sender": mix.name,
        "identity_public": bytes(key).hex(),
        "index": index,
        "count": len(items),
        **tree,
        "signed_bytes": message.hex(),
        "signature": signature.hex(),
    }


def delivery_from(chunk: Mapping[str, Any], position: int) -> Delivery:
    """The delivery of item ``position`` of a chunk vector (docs/wire.md § 13.3)."""
    items = [bytes.fromhex(i) for i in chunk["items"]]
    delivery = delivery_of(
        items, position, sender=chunk["sender"], index=chunk["index"],
        signature=bytes.fromhex(chunk["signature"]),
    )  # fmt: skip
    assert [p.hex() for p in delivery.path] == chunk["paths"][position]
    key = VerifyKey(bytes.fromhex(chunk["identity_public"]))
    assert verify_delivery(delivery, items[position], key, chain_id=chunk["chain_id"],
                           round_id=chunk["round"])  # fmt: skip
    return delivery


def delivery_vector(chunk: Mapping[str, Any], position: int) -> dict[str, Any]:
    delivery = delivery_from(chunk, position)
    return {
        "sender": delivery.sender,
        "chunk": delivery.index,
        "count": delivery.count,
        "position": delivery.position,
        "item": chunk["items"][position],
        "path": [p.hex() for p in delivery.path],
        "root": chunk["root"],
        "signed_bytes": chunk["signed_bytes"],
        "signature": delivery.signature.hex(),
    }


def spec_accusation_bytes(wire: Mapping[str, Any]) -> bytes:
    """docs/wire.md § 13.5: an accusation's canonical bytes, from its wire map."""
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


def spec_page_message(chain_id: str, round_id: int, signer: str, count: int, root: bytes) -> bytes:
    """docs/wire.md § 13.5: the bytes a page's signature covers."""
    return (
        prefixed(b"mixnet/accused-page/v1") + prefixed(chain_id.encode("utf-8"))
        + struct.pack(">Q", round_id) + prefixed(signer.encode("utf-8"))
        + u32(count) + root
    )  # fmt: skip


def spec_refusal_message(chain_id: str, round_id: int, refuser: str, leaf: bytes) -> bytes:
    """docs/wire.md § 13.5: the bytes a refusal's signature covers."""
    return (
        prefixed(b"mixnet/refusal/v1") + prefixed(chain_id.encode("utf-8"))
        + struct.pack(">Q", round_id) + prefixed(refuser.encode("utf-8")) + leaf
    )  # fmt: skip


def signed_page(
    mix: Mix, page: Sequence[Accusation], *, round_id: int, chain_id: str = CHAIN_ID
) -> tuple[bytes, dict[str, Any]]:
    """``mix``'s signature over its ``page`` of accusations, built from the specification
    (§ 13.5) and checked against :mod:`mixnet.trace_signature`, with its vector."""
    encoded = [spec_accusation_bytes(accusation_to_wire(a)) for a in page]
    assert encoded == [accusation_bytes(a) for a in page]
    root = spec_tree_root([spec_leaf(e) for e in encoded])
    message = spec_page_message(chain_id, round_id, mix.name, len(page), root)
    signature = bytes(mix.identity.sign(message).signature)
    sign = message_signer(mix)
    assert sign_page(sign, page, chain_id=chain_id, round_id=round_id, signer=mix.name) == signature
    vector = {
        "signer": mix.name,
        "accusation_bytes": [e.hex() for e in encoded],
        "root": root.hex(),
        "signed_bytes": message.hex(),
        "signature": signature.hex(),
    }
    return signature, vector


def signed_refusal(
    mix: Mix, accusation: Accusation, *, round_id: int
) -> tuple[bytes, dict[str, Any]]:
    """``mix``'s signature over its refusal of ``accusation`` (§ 13.5), checked against
    :mod:`mixnet.trace_signature`, with its vector."""
    leaf = spec_leaf(spec_accusation_bytes(accusation_to_wire(accusation)))
    message = spec_refusal_message(CHAIN_ID, round_id, mix.name, leaf)
    signature = bytes(mix.identity.sign(message).signature)
    made = sign_refusal(message_signer(mix), accusation, chain_id=CHAIN_ID, round_id=round_id,
                        refuser=mix.name)  # fmt: skip
    assert made == signature
    return signature, {"refuser": mix.name, "leaf": leaf.hex(), "signed_bytes": message.hex(),
                       "signature": signature.hex()}  # fmt: skip


def message_signer(mix: Mix) -> Any:
    return lambda message: bytes(mix.identity.sign(message).signature)


def build_blame(
    previous: Mapping[str, Any] | None, fresh_proofs: bool, width: int, valid: Any
) -> dict[str, Any]:
    """The ``signed_chunks.blame`` vector (docs/wire.md § 13.4): in round ``BLAME_ROUND`` mix2
    swaps an honest item of its chunk 1 for a hop-2 onion of its own around an invalid
    payload; mix3 accuses it with mix2's signed delivery; mix2 cannot trace it and blames
    mix3 with that accusation as evidence; the entry mix judges the evidence and names
    mix2."""
    round_id = BLAME_ROUND
    mixes = [Mix(hop, name, CHAIN_ID, round_id) for hop, name in enumerate(MIXES)]
    hops = len(mixes)
    m1, m2, m3 = MIXES
    honest = [
        build_layer(
            f"round{round_id}/{i}", encode_share(fixed_below(f"share/round{round_id}/{i}",
            MODULUS), MODULUS), mixes[2], round_id=round_id,
        )
        for i in range(2)
    ]  # fmt: skip
    forged = build_layer("mix2/forged", BAD_PAYLOAD, mixes[2], round_id=round_id)
    assert not valid(BAD_PAYLOAD) and all(valid(bytes.fromhex(h["plaintext"])) for h in honest)
    items = [bytes.fromhex(honest[0]["layer"]), bytes.fromhex(forged["layer"]),
             bytes.fromhex(honest[1]["layer"])]  # fmt: skip
    assert all(len(i) == onion_length(width, 1) for i in items)
    position, index, chunks, count, clients = 1, 1, 3, 8, 2
    chunk = chunk_vector(
        mixes[1], items, chain_id=CHAIN_ID, round_id=round_id, index=index,
        frame="batch (mix2 to mix3)",
    )  # fmt: skip
    assert len(chunk["paths"][0]) == 2 and len(chunk["paths"][2]) == 1

    stored = None
    if previous is not None:
        old = previous.get("signed_chunks", {}).get("blame", {}).get("step")
        if old is not None and old["item"] == items[position].hex():
            stored = old
    step, step_vector = make_step(
        mixes[2], items[position], stored, fresh_proofs, round_id=round_id
    )
    assert step_vector["inner"] == BAD_PAYLOAD.hex()
    delivery = delivery_from(chunk, position)
    evidence = Accusation(Failure.INVALID_PAYLOAD, (step,), delivery)
    keys = {mix.hop: mix.round_public for mix in mixes}
    identities = {mix.name: bytes(mix.identity.verify_key) for mix in mixes}
    signing = ChunkSigning(CHAIN_ID, tuple(MIXES), identities)

    def holds(accusation: Accusation) -> bool:
        try:
            verify_accusation(accusation, keys, chain_id=CHAIN_ID, round_id=round_id,
                              mixes=hops, validator=valid)  # fmt: skip
        except InvalidEvidence:
            return False
        return True

    assert holds(evidence)
    assert delivered_by(evidence, m2, identities[m2], chain_id=CHAIN_ID, round_id=round_id)

    # the same evidence, judged with other deliveries or altered: each as its accuser signed
    # it on a page and its refuser signed the refusal, so that the judge reaches the evidence
    tampered_proof = bytearray(step.proof)
    tampered_proof[40] ^= 1
    cases: list[tuple[str, Accusation]] = [
        ("as sent: it holds and carries mix2's delivery", evidence),
        ("without the delivery", evidence.delivered(None)),
        ("the delivery names chunk 0", evidence.delivered(replace(delivery, index=0))),
        ("the delivery names position 0", evidence.delivered(replace(delivery, position=0))),
        ("the delivery names sender mix1", evidence.delivered(replace(delivery, sender=m1))),
        (
            "the step's proof is altered: the evidence does not hold",
            Accusation(evidence.failure, (replace(step, proof=bytes(tampered_proof)),), delivery),
        ),
    ]
    judged: list[tuple[str, Accusation, PageProof | None, bytes | None]] = []
    for name, accusation in cases:
        page_signature, _ = signed_page(mixes[2], [accusation], round_id=round_id)
        refusal, _ = signed_refusal(mixes[1], accusation, round_id=round_id)
        judged.append((name, accusation, page_proof([accusation], 0, page_signature), refusal))
    page_signature, page_vector = signed_page(mixes[2], [evidence], round_id=round_id)
    refusal, refusal_vector = signed_refusal(mixes[1], evidence, round_id=round_id)
    on_page = page_proof([evidence], 0, page_signature)
    by_mix2, _ = signed_page(mixes[1], [evidence], round_id=round_id)
    judged += [
        ("the refusal is not signed", evidence, on_page, None),
        ("the refusal is mix3's signature, not mix2's", evidence, on_page,
         signed_refusal(mixes[2], evidence, round_id=round_id)[0]),
        ("the page is not signed", evidence, None, refusal),
        ("the page is signed by mix2, not mix3", evidence, page_proof([evidence], 0, by_mix2),
         refusal),
    ]  # fmt: skip
    judgements: list[dict[str, Any]] = []
    for name, accusation, proof, refused in judged:
        blamer = MIXES[accusation.hop - 1]
        held = holds(accusation)
        signed = delivered_by(
            accusation, blamer, identities[blamer], chain_id=CHAIN_ID, round_id=round_id
        )
        verdict = judge(accusation, held, signing, round_id, proof=proof, refusal=refused,
                        reporter=blamer)  # fmt: skip
        judgements.append(
            {
                "case": name,
                "evidence": jsonable(accusation_to_wire(accusation)),
                "evidence_proof": None if proof is None else jsonable(page_proof_to_wire(proof)),
                "refusal": None if refused is None else refused.hex(),
                "holds": held,
                "delivered_by_blamer": signed,
                "named": verdict.name,
                "reason": verdict.reason,
            }
        )
    assert [j["named"] for j in judgements] == [m2, m3, m3, m3, m3, m3, m2, m2, m2, m2]
    reason = judgements[0]["reason"]

    frames = [
        frame_vector(
            "batch (mix2 to mix3)", m2, m3, "request",
            to_wire(Batch(round_id, m2, index, chunks, clients, count, tuple(items),
                          signature=bytes.fromhex(chunk["signature"]))),
        ),
        frame_vector(
            "accused (mix3 to mix2)", m3, m2, "reply",
            to_wire(Accused(round_id, (evidence,), signature=page_signature)),
        ),
        frame_vector(
            "accused (mix2 to mix1)", m2, m1, "reply",
            to_wire(Accused(round_id, blame=m3, evidence=evidence, proof=on_page,
                            refusal=refusal)),
        ),
        frame_vector(
            "exclude (mix1 to mix2)", m1, m2, "request",
            to_wire(Exclude(round_id, abort=reason)),
        ),
    ]  # fmt: skip
    return {
        "chain_id": CHAIN_ID,
        "round": round_id,
        "mixes": [mix.describe() for mix in mixes],
        "chunk_size": BLAME_CHUNK_SIZE,
        "batch": {"sender": m2, "chunks": chunks, "count": count, "clients": clients},
        "forged_layer": forged,
        "chunk": chunk,
        "position": position,
        "step": step_vector,
        "delivery": delivery_vector(chunk, position),
        "page": page_vector,
        "refusal": refusal_vector,
        "judgements": judgements,
        "frames": frames,
    }


# --------------------------------------------------------------------------- the vectors


def build_proven(
    previous: Mapping[str, Any] | None, fresh_proofs: bool, width: int, valid: Any
) -> dict[str, Any]:
    """The ``proven`` section: a chain of three mixes with ``[chain] ownership_proofs =
    true`` (docs/wire.md § 9.5, § 9.6, § 13)."""
    chain_id, round_id = PROVEN_CHAIN_ID, PROVEN_ROUND
    mixes = [Mix(hop, name, chain_id, round_id) for hop, name in enumerate(MIXES)]
    hops = len(mixes)
    dave_payloads = [
        encode_share(fixed_below(f"share/dave/{i}", MODULUS), MODULUS) for i in range(MESSAGES)
    ]
    trudy_payloads = [
        encode_share(fixed_below(f"share/trudy/{i}", MODULUS), MODULUS) for i in range(MESSAGES)
    ]
    assert all(valid(p) for p in dave_payloads + trudy_payloads)

    # dave: every inner layer carries its proof
    dave_onions: list[dict[str, Any]] = []
    for index, payload in enumerate(dave_payloads):
        layers = build_proven_onion(
            f"dave/{index}", payload, mixes, chain_id=chain_id, round_id=round_id
        )
        assert [layer["hop"] for layer in layers] == [1, 2]
        assert layers[-1]["plaintext"] == payload.hex()
        dave_onions.append(
            {"index": index, "payload": payload.hex(), "onion": layers[0]["layer"],
             "layers": layers}
        )  # fmt: skip
    dave = build_proven_box("dave", dave_onions, mixes, width)
    signs = {layer["sign_bit"] for onion in dave_onions for layer in onion["layers"]}
    assert signs == {0, 1}, "the vectors should show both witness choices"

    # trudy's onion 0: an honest hop-1 layer around a hop-2 item that copies E and the
    # ownership proof of dave's onion 0 at hop 2 onto other ciphertext: no-owner at hop 2
    dave_hop2 = bytes.fromhex(dave_onions[0]["layers"][1]["layer"])
    copied = dave_hop2[: 32 + PROOF_BYTES] + fixed("garbage/no-owner", len(dave_hop2) - 80)
    assert len(copied) == onion_length(width, 1, proven=True)
    assert not owned(copied, chain_id=chain_id, round_id=round_id, hop=2)
    assert not spec_verify_ownership(
        copied[:32],
        copied[32:80],
        ciphertext_digest(copied[80:]),
        spec_binding(chain_id, round_id, 2),
    )
    outer = build_proven_layer("trudy/0/1", copied, mixes[1], chain_id=chain_id, round_id=round_id)
    # trudy's onion 1: her own E with a valid ownership proof over random ciphertext that no
    # key opens: undecryptable at hop 1
    garbage_secret = fixed("ephemeral/trudy/1/1")
    filler_length = onion_length(width, 2, proven=True) - 80
    filler = fixed("garbage/undecryptable/a", 64) + fixed(
        "garbage/undecryptable/b", filler_length - 64
    )
    hop1_ad = spec_binding(chain_id, round_id, 1)
    garbage_proof, garbage_owner = ownership_vector("trudy/1/1", garbage_secret, filler, hop1_ad)
    undecryptable = bytes.fromhex(garbage_owner["ephemeral_public"]) + garbage_proof + filler
    assert len(undecryptable) == onion_length(width, 2, proven=True)
    assert owned(undecryptable, chain_id=chain_id, round_id=round_id, hop=1)
    garbage_layer: dict[str, Any] = {
        "hop": 1,
        "recipient": mixes[1].name,
        "recipient_public": mixes[1].round_public.hex(),
    }
    garbage_layer.update((name, garbage_owner[name]) for name in OWNER_KEY_FIELDS)
    garbage_layer["associated_data"] = hop1_ad.hex()
    garbage_layer["ciphertext"] = filler.hex()
    garbage_layer.update((name, garbage_owner[name]) for name in OWNER_PROOF_FIELDS)
    garbage_layer["layer"] = undecryptable.hex()
    trudy_onions: list[dict[str, Any]] = [
        {"index": 0, "garbage": "no-owner at hop 2", "onion": outer["layer"],
         "layers": [outer]},
        {"index": 1, "garbage": "undecryptable at hop 1", "onion": undecryptable.hex(),
         "layers": [], "garbage_layer": garbage_layer},
    ]  # fmt: skip
    for index in (2, 3):
        layers = build_proven_onion(
            f"trudy/{index}", trudy_payloads[index], mixes, chain_id=chain_id, round_id=round_id
        )
        trudy_onions.append(
            {"index": index, "payload": trudy_payloads[index].hex(),
             "onion": layers[0]["layer"], "layers": layers}
        )  # fmt: skip
    trudy = build_proven_box("trudy", trudy_onions, mixes, width)
    trudy_items = [bytes.fromhex(i) for i in trudy["items"]]

    # the mixes peel: hop 1 cannot open trudy's onion 1, hop 2 cannot open the copied item
    peeled1 = peel_many(
        trudy_items, PrivateKey(mixes[1].round_secret), chain_id=chain_id, round_id=round_id,
        hop_index=1, expected_length=onion_length(width, 2, proven=True), proven=True,
    )  # fmt: skip
    assert peeled1[0] == copied and isinstance(peeled1[1], DecryptionFailed)
    [peeled2] = peel_many(
        [copied], PrivateKey(mixes[2].round_secret), chain_id=chain_id, round_id=round_id,
        hop_index=2, expected_length=len(copied), proven=True,
    )  # fmt: skip
    assert isinstance(peeled2, DecryptionFailed)

    # the accusations: each mix accuses the input it could not peel itself
    stored_steps: list[Mapping[str, Any]] = []
    if previous is not None:
        for stored in previous.get("proven", {}).get("accusations", []):
            stored_steps.extend(stored["steps"])

    def step_for(mix: Mix, item: bytes) -> tuple[Step, dict[str, Any]]:
        stored = next(
            (s for s in stored_steps if s["hop"] == mix.hop and s["item"] == item.hex()), None
        )
        return make_step(
            mix, item, stored, fresh_proofs, proven=True, chain_id=chain_id, round_id=round_id
        )

    undecryptable_step, undecryptable_vector = step_for(mixes[1], undecryptable)
    assert undecryptable_vector["opens"] is False and undecryptable_vector["owned"] is True
    by_code = prove_failure(
        mixes[1].round_secret,
        mixes[1].round_public,
        undecryptable,
        chain_id=chain_id,
        round_id=round_id,
        hop=1,
    )
    assert by_code.shared_secret == undecryptable_step.shared_secret
    assert failure_of(by_code) is Failure.UNDECRYPTABLE
    hop1_step, hop1_vector = step_for(mixes[1], trudy_items[0])
    assert hop1_vector["opens"] is True and hop1_vector["inner"] == copied.hex()
    no_owner_step = Step(2, copied, b"", b"")
    assert (
        prove_failure(
            mixes[2].round_secret,
            mixes[2].round_public,
            copied,
            chain_id=chain_id,
            round_id=round_id,
            hop=2,
        )
        == no_owner_step
    )
    assert failure_of(no_owner_step) is Failure.NO_OWNER
    # revealing S for the copied item would have revealed dave's hop-2 shared secret
    assert bytes(bindings.crypto_scalarmult(mixes[2].round_secret, copied[:32])) == bytes.fromhex(
        dave_onions[0]["layers"][1]["shared_secret"]
    )
    no_owner_vector = {
        "hop": 2,
        "node": mixes[2].name,
        "item": copied.hex(),
        "ephemeral_public": copied[:32].hex(),
        "shared_secret": "",
        "proof": "",
        "ownership_proof": copied[32:80].hex(),
        "ciphertext": copied[80:].hex(),
        "ciphertext_digest": ciphertext_digest(copied[80:]).hex(),
        "associated_data": spec_binding(chain_id, round_id, 2).hex(),
        "owned": False,
    }
    undecryptable_accusation = Accusation(Failure.UNDECRYPTABLE, (undecryptable_step,))
    no_owner_accusation = Accusation(Failure.NO_OWNER, (hop1_step, no_owner_step))
    own_no_owner = Accusation(Failure.NO_OWNER, (no_owner_step,))
    keys = {mix.hop: mix.round_public for mix in mixes}
    for accusation in (undecryptable_accusation, no_owner_accusation, own_no_owner):
        verify_accusation(
            accusation,
            keys,
            mixes=hops,
            validator=valid,
            proven=True,
            chain_id=chain_id,
            round_id=round_id,
        )
        try:  # only a chain with ownership proofs knows these failures
            verify_accusation(
                accusation, keys, mixes=hops, validator=valid, chain_id=chain_id, round_id=round_id
            )
        except InvalidEvidence:
            pass
        else:
            raise AssertionError("accepted without ownership proofs")
    for wrong in (
        Accusation(Failure.NO_OWNER, (Step(1, trudy_items[2], b"", b""),)),  # its proof holds
        Accusation(Failure.UNDECRYPTABLE, (hop1_step,)),  # it opens
        Accusation(Failure.NO_OWNER, (undecryptable_step,)),  # its proof holds
    ):
        try:
            verify_accusation(
                wrong,
                keys,
                mixes=hops,
                validator=valid,
                proven=True,
                chain_id=chain_id,
                round_id=round_id,
            )
        except InvalidEvidence:
            pass
        else:
            raise AssertionError(f"a false {wrong.failure.value} accusation was accepted")

    m1, m2, m3 = MIXES
    by_mix3 = (own_no_owner,)
    by_mix2 = (undecryptable_accusation, no_owner_accusation)
    frames = [
        frame_vector(
            "accused (mix3 to mix2)", m3, m2, "reply",
            to_wire(Accused(round_id, by_mix3, signature=signed_page(
                mixes[2], by_mix3, round_id=round_id, chain_id=chain_id)[0])),
        ),
        frame_vector(
            "accused (mix2 to mix1)", m2, m1, "reply",
            to_wire(Accused(round_id, by_mix2, signature=signed_page(
                mixes[1], by_mix2, round_id=round_id, chain_id=chain_id)[0])),
        ),
        frame_vector(
            "exclude (mix1 to mix2)", m1, m2, "request",
            to_wire(Exclude(round_id, tuple(trudy_items), 1)),
        ),
    ]  # fmt: skip
    return {
        "chain_id": chain_id,
        "round": round_id,
        "ownership_proofs": True,
        "mixes": [mix.describe() for mix in mixes],
        "messages": MESSAGES,
        "payload_length": width,
        "layer_overhead": LAYER_OVERHEAD,
        "proven_layer_overhead": PROVEN_LAYER_OVERHEAD,
        "proof_length": PROOF_BYTES,
        "submission_length": submission_length(width, hops, MESSAGES, proven=True),
        "inner_onion_length": onion_length(width, hops - 1, proven=True),
        "item_lengths": [submission_length(width, hops, MESSAGES, proven=True)]
        + [onion_length(width, hops - hop, proven=True) for hop in range(1, hops + 1)],
        "submissions": [dave, trudy],
        "accusations": [
            {
                "name": "undecryptable at hop 1",
                "client": "trudy",
                "index": 1,
                "failure": Failure.UNDECRYPTABLE.value,
                "steps": [undecryptable_vector],
            },
            {
                "name": "no-owner at hop 2",
                "client": "trudy",
                "index": 0,
                "failure": Failure.NO_OWNER.value,
                "copied_from": {"client": "dave", "index": 0, "hop": 2},
                "steps": [hop1_vector, no_owner_vector],
            },
        ],
        "frames": frames,
    }


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
    # -- duplicates (§ 13.3): two mix-2 layers around one mix-3 onion (mallory's onion 0 at
    #    hop 2); mix 2 accuses both inputs, and the two accusations hold only together
    twin_onion = layer_item(mallory, 0, 2)
    twin_layers = [build_layer(f"mallory/twin/{k}", twin_onion, mixes[1]) for k in "ab"]
    stored_twins: list[Mapping[str, Any]] = []
    if previous is not None:
        stored_twins = list(previous.get("duplicates", {}).get("steps", []))
    twin_steps: list[dict[str, Any]] = []
    for twin in twin_layers:
        item = bytes.fromhex(twin["layer"])
        stored = next((s for s in stored_twins if s["item"] == item.hex()), None)
        twin_steps.append(make_step(mixes[1], item, stored, fresh_proofs)[1])
    assert twin_steps[0]["item"] != twin_steps[1]["item"]
    assert twin_steps[0]["inner"] == twin_steps[1]["inner"] == twin_onion.hex()
    # -- signed chunks (§ 8.5): every mix but the last signs each chunk it sends; mix1 and
    #    mix2 each send one chunk, and each accusation carries the delivery of its first item;
    #    mix3's chunk to the analyzer is unsigned (§ 6.3)
    hop1_items = [layer_item(submissions[c], i, 1) for c, i in MIX1_ORDER]
    hop2_items = [layer_item(submissions[c], i, 2) for c, i in MIX2_ORDER]
    delivered = [alice_payloads[i] for i in MIX3_ORDER]
    round_chunks = [
        chunk_vector(mix, items, chain_id=CHAIN_ID, round_id=ROUND, index=0, frame=frame)
        for mix, items, frame in (
            (mixes[0], hop1_items, "batch"),
            (mixes[1], hop2_items, "batch (mix2 to mix3)"),
        )
    ]
    chunk_signatures = [bytes.fromhex(c["signature"]) for c in round_chunks]
    at1, at2 = MIX1_ORDER.index(("mallory", 2)), MIX2_ORDER.index(("mallory", 2))
    assert hop1_items[at1] == steps[0].item and hop2_items[at2] == steps[1].item
    accusation = Accusation(
        Failure.INVALID_PAYLOAD, tuple(steps), delivery_from(round_chunks[0], at1)
    )
    last_only = Accusation(
        Failure.INVALID_PAYLOAD, (steps[1],), delivery_from(round_chunks[1], at2)
    )
    keys = {mix.hop: mix.round_public for mix in mixes}
    verify_accusation(
        accusation, keys, chain_id=CHAIN_ID, round_id=ROUND, mixes=hops, validator=valid
    )

    # -- a chain with ownership proofs: dave's honest box, trudy's box with two garbage items
    proven = build_proven(previous, fresh_proofs, width, valid)

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
    mallory_hop1 = [layer_item(mallory, i, 1) for i in range(MESSAGES)]
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
        # § 6.1 submit-many: alice's submission and one whose box is a byte short
        frame_vector(
            "submit-many", "client", m1, "submit-many",
            submit_many_frame(
                [Submit(ROUND, "alice", alice_box), Submit(ROUND, "bob", alice_box[:-1])]
            ),
        ),
        frame_vector(
            "receipts", m1, "client", "receipts",
            receipts_frame(
                [
                    to_wire(Accepted(ROUND, "alice")),
                    error_frame(BadLength(f"field 'box' must be {len(alice_box)} bytes, "
                                          f"got {len(alice_box) - 1}")),
                ]
            ),
        ),
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
            to_wire(Batch(ROUND, m1, 0, 1, 2, len(hop1_items), tuple(hop1_items),
                          signature=chunk_signatures[0])),
        ),
        frame_vector("batch-ack", m2, m1, "reply", to_wire(BatchAck(ROUND, 0))),
        frame_vector(
            "batch (mix2 to mix3)", m2, m3, "request",
            to_wire(Batch(ROUND, m2, 0, 1, 2, len(hop2_items), tuple(hop2_items),
                          signature=chunk_signatures[1])),
        ),
        frame_vector("trace", m1, m2, "request", to_wire(Trace(ROUND))),
        frame_vector(
            "accused (mix3 to mix2)", m3, m2, "reply",
            to_wire(Accused(ROUND, (last_only,),
                            signature=signed_page(mixes[2], (last_only,), round_id=ROUND)[0])),
        ),
        frame_vector(
            "accused", m2, m1, "reply",
            to_wire(Accused(ROUND, (accusation,),
                            signature=signed_page(mixes[1], (accusation,), round_id=ROUND)[0])),
        ),
        frame_vector(
            "exclude", m1, m2, "request", to_wire(Exclude(ROUND, tuple(mallory_hop1), 1))
        ),
        frame_vector("excluded", m2, m1, "reply", to_wire(Excluded(ROUND))),
        # a verdict in pages (§ 6.3): page 1 asked, a page that promises more, and the first
        # of two exclude pages (the fields are left out of single-page frames, as above)
        frame_vector("trace (page 1)", m1, m2, "request", to_wire(Trace(ROUND, 1))),
        frame_vector(
            "accused (a page, more follow)", m2, m1, "reply",
            to_wire(Accused(ROUND, (accusation,), more=True,
                            signature=signed_page(mixes[1], (accusation,), round_id=ROUND)[0])),
        ),
        frame_vector(
            "exclude (page 0 of 2)", m1, m2, "request",
            to_wire(Exclude(ROUND, tuple(mallory_hop1), 2, page=0, pages=2)),
        ),
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
        "duplicates": {
            "failure": Failure.DUPLICATE.value,
            "onion": twin_onion.hex(),
            "layers": twin_layers,
            "steps": twin_steps,
        },
        "proven": proven,
        "signed_chunks": {
            "domain": CHUNK_DOMAIN.decode(),
            "trees": [tree_vector(TREE_ITEMS[:n]) for n in range(len(TREE_ITEMS) + 1)],
            "chunks": round_chunks,
            "deliveries": [
                {
                    "frame": "accused",
                    "client": "mallory",
                    "index": 2,
                    "hop": 1,
                    **delivery_vector(round_chunks[0], at1),
                },
                {
                    "frame": "accused (mix3 to mix2)",
                    "client": "mallory",
                    "index": 2,
                    "hop": 2,
                    **delivery_vector(round_chunks[1], at2),
                },
            ],
            "blame": build_blame(previous, fresh_proofs, width, valid),
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
