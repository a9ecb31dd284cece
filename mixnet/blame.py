"""Verifiable evidence that an item in a round is bad, and of how it got where it was found.

A round must not fail because one submission is bad, and the mechanism that saves it must not
let a mix learn a link it could not learn anyway. So a mix reveals which of its inputs produced
an output only for an output proven bad, and it proves its own step when it does
(``docs/protocol.md``, "Trace and exclude").

A :class:`Step` is one mix's proof about one of its inputs (an onion layer made for it): the
layer's X25519 shared secret ``S`` with a Chaum–Pedersen proof that ``S`` is right for the
mix's round key (:mod:`mixnet.dleq`). With ``S`` anyone opens the layer and sees what it
holds. An :class:`Accusation` is a chain of steps over consecutive hops: each layer opens,
is bound to this chain, round and hop, and holds exactly the next step's item; the last one
holds something provably bad (:class:`Failure`).

Why revealing ``S`` is safe here: every step's layer *authenticates* under ``S`` and its
binding (its Poly1305 tag verifies), and only someone who knew ``S`` could have made such a
layer — the item's creator, who knew the ephemeral secret. ``S`` tells nobody anything its
creator did not know, and it says nothing about any other layer (a related ephemeral key
``a·E`` gives another ``S`` that nobody without the round key can compute). Layers that do
*not* authenticate get no ``S`` revealed (:func:`prove_step` refuses them): for those, ``S``
would be a Diffie–Hellman oracle (``mixnet.dleq``'s caveat).

Lengths and types are checked before any cryptography; evidence that does not hold raises
:class:`InvalidEvidence` (a :class:`~mixnet.errors.BadSignature`, wire code
``bad-signature``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nacl.signing import VerifyKey

from mixnet.chunk_signature import Delivery, verify_delivery
from mixnet.dleq import (
    PROOF_LENGTH,
    InvalidProof,
    prove_shared_secret,
    verify_shared_secret,
)
from mixnet.errors import BadLength, BadSignature, DecryptionFailed, MixnetError
from mixnet.onion import (
    MAX_LAYERS,
    binding_data,
    layer_overhead,
    open_layer_with_secret,
    split_layer,
)
from mixnet.ownership import ciphertext_digest, verify_ownership

__all__ = [
    "SECRET_LENGTH",
    "Accusation",
    "Failure",
    "InvalidEvidence",
    "PayloadValidator",
    "Step",
    "accept_all",
    "delivered_by",
    "failure_of",
    "open_layer",
    "owned",
    "prove_failure",
    "prove_step",
    "step_context",
    "verify_accusation",
    "verify_accusations",
]

#: Bytes of a revealed X25519 shared secret.
SECRET_LENGTH = 32
_STEP_DOMAIN = b"mixnet/blame-step/v1"
_ITEM_HASH_LENGTH = 32

#: The application's check of a plaintext payload at the end of the chain: ``True`` if the
#: payload is a valid message for the round (cloaknet: a share of the right width, < N). Must
#: be a pure function: every mix re-runs it on the payload an accusation opens to.
PayloadValidator = Callable[[bytes], bool]


def accept_all(payload: bytes) -> bool:
    """The default :data:`PayloadValidator`: every payload of the right length is valid."""
    return True


class InvalidEvidence(BadSignature):
    """An accusation or step that does not prove what it claims."""


class Failure(enum.Enum):
    """What is wrong with the item an accusation ends at.

    * ``INVALID_PAYLOAD`` — the last mix's layer authenticates (so it is bound to this
      chain, round and hop), and the payload it holds is refused by the application's
      validator.
    * ``UNDECRYPTABLE`` — (chains with ownership proofs) a layer after the entry mix's whose
      ownership proof verifies but which does not authenticate under its proven shared
      secret: its maker knew ``S``, so revealing it is safe.
    * ``NO_OWNER`` — (chains with ownership proofs) a layer after the entry mix's whose
      ownership proof does not verify (:mod:`mixnet.ownership`): bad on its face; its step
      reveals no secret.
    * ``DUPLICATE`` — a layer of a mix before the last that authenticates and holds the same
      onion as another input's layer at that mix: honest clients' onions never collide, so
      its maker made the collision. It holds only together with such an accusation about
      another input (:func:`verify_accusations` pairs them); its maker knew ``S``, so
      revealing it is safe.

    (Onion format 1 also had ``wrong-binding``; since the binding is the layer's associated
    data, a wrongly bound layer no longer authenticates, so it cannot be proven about.)
    """

    INVALID_PAYLOAD = "invalid-payload"
    UNDECRYPTABLE = "undecryptable"
    NO_OWNER = "no-owner"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class Step:
    """Mix ``hop``'s proof about ``item``, one of its inputs: ``shared_secret`` is
    ``X25519(k, item[:32])`` for the mix's round key, and ``proof`` the
    :data:`~mixnet.dleq.PROOF_LENGTH`-byte Chaum–Pedersen proof of it under
    :func:`step_context`. Both are empty (``b""``) in the step that ends a ``no-owner``
    accusation, which reveals nothing (:attr:`revealed` is then ``False``). Construction
    checks types and lengths only (``TypeError``, :class:`~mixnet.errors.BadLength`; the
    item's length is checked when the layer is opened)."""

    hop: int
    item: bytes
    shared_secret: bytes
    proof: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.hop, int) or isinstance(self.hop, bool):
            raise TypeError(f"hop must be int, not {type(self.hop).__name__}")
        if not 0 <= self.hop < MAX_LAYERS:
            raise BadLength(f"hop must be in [0, {MAX_LAYERS}), got {self.hop}")
        revealed = bool(self.shared_secret) or bool(self.proof)
        for name, value, length in (
            ("shared_secret", self.shared_secret, SECRET_LENGTH),
            ("proof", self.proof, PROOF_LENGTH),
        ):
            if not isinstance(value, bytes):
                raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
            if len(value) != (length if revealed else 0):
                raise BadLength(f"{name} must be {length} bytes, got {len(value)}")
        if not isinstance(self.item, bytes):
            raise TypeError(f"item must be bytes, not {type(self.item).__name__}")
        if not self.item:
            raise BadLength("item must not be empty")

    @property
    def revealed(self) -> bool:
        """Whether this step reveals the layer's shared secret (all but a ``no-owner``
        accusation's last step do)."""
        return bool(self.shared_secret)


@dataclass(frozen=True, slots=True)
class Accusation:
    """Evidence that ``steps[0].item`` (an input of mix ``steps[0].hop``) is bad: the steps
    cover consecutive hops, each layer holds the next step's item, and the last one shows
    ``failure``."""

    failure: Failure
    steps: tuple[Step, ...]
    #: the predecessor's signed chunk holding :attr:`item` (:mod:`mixnet.chunk_signature`),
    #: if the accuser has it: what lets anyone tell who made the item up
    delivery: Delivery | None = None

    @property
    def hop(self) -> int:
        """The hop whose input is accused."""
        return self.steps[0].hop

    @property
    def item(self) -> bytes:
        """The accused input of mix :attr:`hop` (the output of the mix before it)."""
        return self.steps[0].item

    def extended(self, step: Step, delivery: Delivery | None = None) -> Accusation:
        """This accusation traced one hop back: ``step`` is the previous mix's proof that its
        input opens to :attr:`item` (checked by :func:`verify_accusation`, not here), and
        ``delivery`` the signed chunk that brought that input."""
        return Accusation(self.failure, (step, *self.steps), delivery)

    def delivered(self, delivery: Delivery | None) -> Accusation:
        """This accusation with ``delivery`` for its first item."""
        return Accusation(self.failure, self.steps, delivery)


def _length_prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def step_context(*, chain_id: str, round_id: int, hop: int, item: bytes) -> bytes:
    """The context a step's proof is bound to: the length-prefixed domain string and UTF-8
    chain id, the round id (big-endian uint64), the hop (big-endian uint16) and BLAKE2b-256
    of the item. A proof never verifies for another chain, round, hop or item."""
    chain = chain_id.encode("utf-8")
    return b"".join(
        (
            _length_prefixed(_STEP_DOMAIN),
            _length_prefixed(chain),
            struct.pack(">QH", round_id, hop),
            hashlib.blake2b(item, digest_size=_ITEM_HASH_LENGTH).digest(),
        )
    )


def open_layer(
    item: bytes,
    shared_secret: bytes,
    public_key: bytes,
    *,
    chain_id: str,
    round_id: int,
    hop: int,
    proven: bool = False,
) -> bytes:
    """Open layer ``item`` (made for ``public_key`` at ``hop``; with an ownership proof if
    ``proven``) with a revealed shared secret and return what it holds.

    Does not check the secret (see :func:`verify_accusation`). Raises
    :class:`~mixnet.errors.DecryptionFailed` if the layer does not authenticate (for that
    secret, or for this chain, round and hop), and ``TypeError`` /
    :class:`~mixnet.errors.BadLength` for malformed arguments.
    """
    if not isinstance(item, bytes):
        raise TypeError(f"item must be bytes, not {type(item).__name__}")
    ephemeral, _, ciphertext = split_layer(item, proven=proven)
    binding = binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop)
    return open_layer_with_secret(ephemeral + ciphertext, public_key, shared_secret, binding)


def owned(item: bytes, *, chain_id: str, round_id: int, hop: int) -> bool:
    """Whether layer ``item`` (of a chain with ownership proofs, at ``hop``) carries a valid
    ownership proof (:func:`mixnet.ownership.verify_ownership`). ``False`` for an item too
    short to hold one."""
    try:
        ephemeral, proof, ciphertext = split_layer(item, proven=True)
    except BadLength:
        return False
    binding = binding_data(chain_id=chain_id, round_id=round_id, hop_index=hop)
    return verify_ownership(ephemeral, proof, ciphertext_digest(ciphertext), binding)


def _check_item(item: object, proven: bool) -> bytes:
    if not isinstance(item, bytes):
        raise TypeError(f"item must be bytes, not {type(item).__name__}")
    overhead = layer_overhead(proven)
    if len(item) < overhead:
        raise BadLength(f"item must be at least {overhead} bytes, got {len(item)}")
    return item


def prove_step(
    secret_key: bytes,
    public_key: bytes,
    item: bytes,
    *,
    chain_id: str,
    round_id: int,
    hop: int,
    proven: bool = False,
) -> Step:
    """Mix ``hop``'s proof about its input ``item``, made with its round key pair.

    Refuses (raises :class:`~mixnet.errors.DecryptionFailed`) when the layer does not
    authenticate: revealing the shared secret of such a layer would be a Diffie–Hellman
    oracle for the round key (module docstring; see :func:`prove_failure` for chains with
    ownership proofs). Raises ``TypeError`` / :class:`~mixnet.errors.BadLength` for
    malformed arguments (before any math) and :class:`~mixnet.dleq.InvalidPoint` for a
    small-order or twist ephemeral key.
    """
    _check_item(item, proven)
    context = step_context(chain_id=chain_id, round_id=round_id, hop=hop, item=item)
    proof = prove_shared_secret(secret_key, item[:32], context=context)
    secret = proof.shared_secret
    open_layer(
        item, secret, public_key, chain_id=chain_id, round_id=round_id, hop=hop, proven=proven
    )
    return Step(hop, item, secret, proof.to_bytes())


def prove_failure(
    secret_key: bytes, public_key: bytes, item: bytes, *, chain_id: str, round_id: int, hop: int
) -> Step:
    """Mix ``hop``'s evidence that its input ``item`` (on a chain with ownership proofs)
    cannot be peeled: a step without a secret if the item's ownership proof does not verify
    (the accusation's failure is then ``no-owner``), else the step revealing the proven
    shared secret (``undecryptable``: safe, as the item's maker knew it).

    :raises ValueError: the layer does authenticate (it is not a failure).
    :raises TypeError, BadLength: malformed arguments.
    """
    _check_item(item, True)
    if not owned(item, chain_id=chain_id, round_id=round_id, hop=hop):
        return Step(hop, item, b"", b"")
    context = step_context(chain_id=chain_id, round_id=round_id, hop=hop, item=item)
    proof = prove_shared_secret(secret_key, item[:32], context=context)
    try:
        open_layer(
            item, proof.shared_secret, public_key,
            chain_id=chain_id, round_id=round_id, hop=hop, proven=True,
        )  # fmt: skip
    except DecryptionFailed:
        return Step(hop, item, proof.shared_secret, proof.to_bytes())
    raise ValueError("the layer authenticates: it is not a failure")


def failure_of(step: Step) -> Failure:
    """The failure a step that ends a proven-chain accusation about an unpeelable layer
    shows: ``no-owner`` without a secret, ``undecryptable`` with one."""
    return Failure.UNDECRYPTABLE if step.revealed else Failure.NO_OWNER


def _check_step(
    step: Step, public_key: bytes, chain_id: str, round_id: int, proven: bool
) -> bytes | None:
    """Verify ``step``'s proof and open its layer; ``None`` if it does not authenticate."""
    context = step_context(chain_id=chain_id, round_id=round_id, hop=step.hop, item=step.item)
    try:
        verify_shared_secret(
            public_key, step.item[:32], step.shared_secret, step.proof, context=context
        )
    except InvalidProof as err:
        raise InvalidEvidence(f"hop {step.hop}: {err}") from None
    try:
        return open_layer(
            step.item, step.shared_secret, public_key,
            chain_id=chain_id, round_id=round_id, hop=step.hop, proven=proven,
        )  # fmt: skip
    except (DecryptionFailed, BadLength):
        return None


def verify_accusations(
    accusations: Sequence[Accusation],
    public_keys: Mapping[int, bytes],
    *,
    chain_id: str,
    round_id: int,
    mixes: int,
    validator: PayloadValidator,
    proven: bool = False,
) -> list[bool]:
    """Whether each of ``accusations`` (one reply's) proves its item bad: each is checked by
    :func:`verify_accusation`, and a ``duplicate`` one holds only if another that holds
    ends at the same hop, at a different input, with a layer that holds the same onion."""
    results: list[bool] = []
    held: dict[tuple[int, bytes], set[bytes]] = {}  # (hop, onion) -> the inputs that open to it
    ends: list[tuple[int, bytes, bytes] | None] = []
    for accusation in accusations:
        try:
            onion = verify_accusation(
                accusation, public_keys, chain_id=chain_id, round_id=round_id, mixes=mixes,
                validator=validator, proven=proven,
            )  # fmt: skip
        except MixnetError:
            results.append(False)
            ends.append(None)
            continue
        results.append(True)
        if onion is None:
            ends.append(None)
            continue
        last = accusation.steps[-1]
        held.setdefault((last.hop, onion), set()).add(last.item)
        ends.append((last.hop, onion, last.item))
    for index, end in enumerate(ends):
        if end is not None and len(held[end[0], end[1]]) < 2:
            results[index] = False  # a duplicate of nothing
    return results


def verify_accusation(
    accusation: Accusation,
    public_keys: Mapping[int, bytes],
    *,
    chain_id: str,
    round_id: int,
    mixes: int,
    validator: PayloadValidator,
    proven: bool = False,
) -> bytes | None:
    """Return if ``accusation`` proves its item bad; raise :class:`InvalidEvidence` if not.
    For a ``duplicate`` accusation it returns the onion the last step's layer holds, which
    must be another input's too (:func:`verify_accusations`); else ``None``.

    ``public_keys`` maps each hop the steps cover to that mix's X25519 round public key (from
    its verified, signed announcement); ``mixes`` is the number of mixes (the last mix is hop
    ``mixes - 1``); ``proven``: the chain requires ownership proofs in the layers after the
    entry mix's. Checked, in order: the steps are non-empty and cover consecutive hops
    below ``mixes``; every step but the last reveals a secret whose proof verifies, and its
    layer authenticates (with this chain, round and hop as associated data) and holds
    exactly the next step's item; the last step shows the failure: ``invalid-payload`` — it
    is the last mix's, authenticates, and ``validator`` refuses the payload it holds;
    ``undecryptable`` (``proven`` only, after the entry mix) — its ownership proof and its
    secret's proof verify and the layer does not authenticate; ``no-owner`` (``proven``
    only, after the entry mix) — it reveals nothing and its ownership proof does not verify;
    ``duplicate`` — it is a mix's before the last, after the entry mix, and authenticates.
    """
    steps = accusation.steps
    if not steps:
        raise InvalidEvidence("an accusation needs at least one step")
    first = steps[0].hop
    for offset, step in enumerate(steps):
        if step.hop != first + offset or step.hop >= mixes:
            raise InvalidEvidence("the steps do not cover consecutive hops of the chain")
        if step.hop not in public_keys:
            raise InvalidEvidence(f"no round key for hop {step.hop}")
        ends_no_owner = offset + 1 == len(steps) and accusation.failure is Failure.NO_OWNER
        if not step.revealed and not ends_no_owner:
            raise InvalidEvidence(f"hop {step.hop}: the step reveals no secret")
    failure = accusation.failure
    if failure is Failure.DUPLICATE:
        if not 0 < steps[-1].hop < mixes - 1:
            raise InvalidEvidence("a duplicate is only shown at a mix between the first and last")
    elif failure is not Failure.INVALID_PAYLOAD and (not proven or steps[-1].hop == 0):
        raise InvalidEvidence(f"a {failure.value} accusation needs ownership proofs")
    for index, step in enumerate(steps):
        last = index + 1 == len(steps)
        if last and failure is Failure.NO_OWNER:
            if step.revealed:
                raise InvalidEvidence(f"hop {step.hop}: a no-owner step reveals nothing")
            if owned(step.item, chain_id=chain_id, round_id=round_id, hop=step.hop):
                raise InvalidEvidence(f"hop {step.hop}: the layer's ownership proof holds")
            return None
        layer_proven = proven and step.hop > 0
        inner = _check_step(step, public_keys[step.hop], chain_id, round_id, layer_proven)
        if last and failure is Failure.UNDECRYPTABLE:
            if inner is not None:
                raise InvalidEvidence(f"hop {step.hop}: the layer authenticates")
            if not owned(step.item, chain_id=chain_id, round_id=round_id, hop=step.hop):
                raise InvalidEvidence(f"hop {step.hop}: the layer's ownership proof fails")
            return None
        if inner is None:
            raise InvalidEvidence(f"hop {step.hop}: the layer does not authenticate")
        if not last:
            if not hmac.compare_digest(inner, steps[index + 1].item):
                raise InvalidEvidence(f"hop {step.hop}: the layer holds another item")
            continue
        if failure is Failure.DUPLICATE:
            return inner
        if step.hop != mixes - 1:
            raise InvalidEvidence("a payload is only checked at the last mix")
        if validator(inner):
            raise InvalidEvidence("the validator accepts the payload")
    return None


def delivered_by(
    accusation: Accusation, sender: str, identity: bytes, *, chain_id: str, round_id: int
) -> bool:
    """Whether ``accusation`` carries ``sender``'s signed chunk holding its first item
    (``identity``: the sender's 32-byte Ed25519 public key). Never raises for hostile
    values."""
    delivery = accusation.delivery
    if delivery is None or delivery.sender != sender:
        return False
    try:
        key = VerifyKey(identity)
    except (TypeError, ValueError):
        return False
    return verify_delivery(delivery, accusation.item, key, chain_id=chain_id, round_id=round_id)
