"""Tests for mixnet.blame: accusations a mix can prove and nobody can forge."""

from __future__ import annotations

from dataclasses import replace

import pytest
from nacl.public import PrivateKey

from mixnet.blame import (
    Accusation,
    Failure,
    InvalidEvidence,
    Step,
    failure_of,
    open_layer,
    owned,
    prove_failure,
    prove_step,
    step_context,
    verify_accusation,
    verify_accusations,
)
from mixnet.dleq import SMALL_ORDER_U, InvalidPoint
from mixnet.errors import BadLength, BadSignature, DecryptionFailed
from mixnet.onion import binding_data, onion_length, peel_many, seal_layer, wrap
from mixnet.ownership import ciphertext_digest, new_ephemeral, prove_ownership

CHAIN = "blame-test"
ROUND = 41
MIXES = 3
PAYLOAD = 4


def valid(payload: bytes) -> bool:
    """The test application's validator: the payload's first byte is below 0x80."""
    return payload[0] < 0x80


@pytest.fixture(scope="module")
def keys() -> list[tuple[bytes, bytes]]:
    pairs = [PrivateKey.generate() for _ in range(MIXES)]
    return [(bytes(sk), bytes(sk.public_key)) for sk in pairs]


def publics(keys: list[tuple[bytes, bytes]]) -> dict[int, bytes]:
    return {hop: pk for hop, (_, pk) in enumerate(keys)}


def layer(public_key: bytes, inner: bytes, *, hop: int, round_id: int = ROUND) -> bytes:
    """One layer bound to ``hop`` (which may be the wrong one)."""
    return seal_layer(inner, public_key, chain_id=CHAIN, round_id=round_id, hop_index=hop)


def peel_path(onion: bytes, keys: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The item at each hop (hop 0's input first) of an onion every layer of which opens."""
    items = [onion]
    for hop, (sk, _) in enumerate(keys):
        (inner,) = peel_many(
            [items[-1]], PrivateKey(sk), chain_id=CHAIN, round_id=ROUND, hop_index=hop,
            expected_length=len(items[-1]),
        )  # fmt: skip
        assert isinstance(inner, bytes)
        items.append(inner)
    return items


def trace(
    items: list[bytes], keys: list[tuple[bytes, bytes]], failure: Failure, last: int
) -> Accusation:
    """The accusation each mix builds when the item fails at hop ``last``: the last step first,
    then one step back per hop, as the trace runs."""
    sk, pk = keys[last]
    acc = Accusation(
        failure, (prove_step(sk, pk, items[last], chain_id=CHAIN, round_id=ROUND, hop=last),)
    )
    for hop in reversed(range(1, last)):
        sk, pk = keys[hop]
        acc = acc.extended(prove_step(sk, pk, items[hop], chain_id=CHAIN, round_id=ROUND, hop=hop))
    return acc


def check(acc: Accusation, keys: list[tuple[bytes, bytes]]) -> None:
    verify_accusation(
        acc, publics(keys), chain_id=CHAIN, round_id=ROUND, mixes=MIXES, validator=valid
    )


@pytest.fixture(scope="module")
def poisoned(keys: list[tuple[bytes, bytes]]) -> tuple[list[bytes], Accusation]:
    """A correctly wrapped payload the validator refuses, traced from the last mix to hop 1."""
    onion = wrap(b"\xff" * PAYLOAD, [pk for _, pk in keys], chain_id=CHAIN, round_id=ROUND)
    items = peel_path(onion, keys)
    return items, trace(items, keys, Failure.INVALID_PAYLOAD, MIXES - 1)


def test_invalid_payload_is_proven_at_every_depth(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    items, acc = poisoned
    assert acc.hop == 1 and acc.item == items[1]
    check(acc, keys)
    check(Accusation(acc.failure, acc.steps[1:]), keys)  # as the last mix's predecessor sees it


def test_a_valid_payload_cannot_be_accused(keys: list[tuple[bytes, bytes]]) -> None:
    onion = wrap(b"\x01" * PAYLOAD, [pk for _, pk in keys], chain_id=CHAIN, round_id=ROUND)
    acc = trace(peel_path(onion, keys), keys, Failure.INVALID_PAYLOAD, MIXES - 1)
    with pytest.raises(InvalidEvidence, match="validator accepts"):
        check(acc, keys)


def test_a_payload_is_only_judged_at_the_last_mix(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    _, acc = poisoned
    with pytest.raises(InvalidEvidence, match="only checked at the last mix"):
        check(Accusation(acc.failure, acc.steps[:1]), keys)


def test_a_wrongly_bound_layer_does_not_open_and_gets_no_secret(
    keys: list[tuple[bytes, bytes]],
) -> None:
    """A client binds its innermost layer to hop 0: since the binding is the layer's
    associated data the last mix cannot open it, and refuses to reveal its secret (format 1
    could prove this case; format 2 treats it like any layer that does not authenticate)."""
    inner = layer(keys[2][1], b"\x01" * PAYLOAD, hop=0)
    (result,) = peel_many(
        [inner], PrivateKey(keys[2][0]), chain_id=CHAIN, round_id=ROUND, hop_index=2,
        expected_length=len(inner),
    )  # fmt: skip
    assert isinstance(result, DecryptionFailed)
    with pytest.raises(DecryptionFailed):
        prove_step(*keys[2], inner, chain_id=CHAIN, round_id=ROUND, hop=2)
    assert Failure("invalid-payload") is Failure.INVALID_PAYLOAD


def test_forged_secret_or_proof_is_refused(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    _, acc = poisoned
    last = acc.steps[-1]
    other = prove_step(*keys[1], acc.steps[0].item, chain_id=CHAIN, round_id=ROUND, hop=1)
    forgeries = [
        replace(
            last,
            shared_secret=bytes(a ^ b for a, b in zip(last.shared_secret, b"\1" * 32, strict=True)),
        ),
        replace(last, proof=other.proof),
        replace(last, shared_secret=other.shared_secret, proof=other.proof),
        replace(last, proof=last.proof[:32] + last.proof[64:] + last.proof[32:64]),
    ]
    for forged in forgeries:
        with pytest.raises(BadSignature):
            check(Accusation(acc.failure, (*acc.steps[:-1], forged)), keys)


def test_proofs_are_bound_to_round_hop_and_item(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    _, acc = poisoned
    with pytest.raises(InvalidEvidence):
        verify_accusation(
            acc, publics(keys), chain_id=CHAIN, round_id=ROUND + 1, mixes=MIXES, validator=valid
        )
    with pytest.raises(InvalidEvidence):
        verify_accusation(
            acc, publics(keys), chain_id="other", round_id=ROUND, mixes=MIXES, validator=valid
        )
    swapped = {1: keys[2][1], 2: keys[1][1]}
    with pytest.raises(InvalidEvidence):
        verify_accusation(
            acc, swapped, chain_id=CHAIN, round_id=ROUND, mixes=MIXES, validator=valid
        )
    contexts = {
        step_context(chain_id=CHAIN, round_id=ROUND, hop=1, item=acc.item),
        step_context(chain_id=CHAIN, round_id=ROUND, hop=2, item=acc.item),
        step_context(chain_id=CHAIN, round_id=ROUND + 1, hop=1, item=acc.item),
        step_context(chain_id=CHAIN, round_id=ROUND, hop=1, item=acc.steps[1].item),
    }
    assert len(contexts) == 4


def test_a_lying_mix_cannot_splice_a_trace(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    """Mix 1 cannot pass the accusation to an honest item of its own: its step would have
    to open to the accused item."""
    items, acc = poisoned
    honest = wrap(b"\x02" * PAYLOAD, [pk for _, pk in keys], chain_id=CHAIN, round_id=ROUND)
    honest_items = peel_path(honest, keys)
    spliced = Accusation(
        acc.failure,
        (
            prove_step(*keys[1], honest_items[1], chain_id=CHAIN, round_id=ROUND, hop=1),
            *acc.steps[1:],
        ),
    )
    with pytest.raises(InvalidEvidence, match="holds another item"):
        check(spliced, keys)
    gap = Accusation(acc.failure, (acc.steps[0], acc.steps[0], acc.steps[1]))
    with pytest.raises(InvalidEvidence, match="consecutive"):
        check(gap, keys)
    with pytest.raises(InvalidEvidence, match="at least one"):
        check(Accusation(acc.failure, ()), keys)
    with pytest.raises(InvalidEvidence, match="no round key"):
        verify_accusation(
            acc, {2: keys[2][1]}, chain_id=CHAIN, round_id=ROUND, mixes=MIXES, validator=valid
        )
    assert items[1] != honest_items[1]


def test_no_secret_is_revealed_for_a_layer_that_does_not_authenticate(
    keys: list[tuple[bytes, bytes]],
) -> None:
    """The Diffie–Hellman oracle: an item that copies an honest layer's ephemeral key but not
    its ciphertext must not get its shared secret revealed."""
    honest = layer(keys[1][1], b"\x00" * 80, hop=1)
    copied = honest[:32] + bytes(len(honest) - 32)
    with pytest.raises(DecryptionFailed):
        prove_step(*keys[1], copied, chain_id=CHAIN, round_id=ROUND, hop=1)
    garbage = bytes(range(96))
    with pytest.raises((DecryptionFailed, InvalidPoint)):
        prove_step(*keys[1], garbage, chain_id=CHAIN, round_id=ROUND, hop=1)


def test_small_order_ephemeral_keys_are_refused(keys: list[tuple[bytes, bytes]]) -> None:
    for u in sorted(SMALL_ORDER_U):
        item = u.to_bytes(32, "little") + bytes(64)
        with pytest.raises(InvalidPoint):
            prove_step(*keys[1], item, chain_id=CHAIN, round_id=ROUND, hop=1)


def test_a_step_whose_layer_does_not_authenticate_is_refused(
    keys: list[tuple[bytes, bytes]], poisoned: tuple[list[bytes], Accusation]
) -> None:
    """A proof for the right ephemeral key does not make a tampered ciphertext evidence."""
    _, acc = poisoned
    last = acc.steps[-1]
    tampered = last.item[:40] + bytes([last.item[40] ^ 1]) + last.item[41:]
    forged = replace(last, item=tampered)
    with pytest.raises(InvalidEvidence):
        check(Accusation(acc.failure, (*acc.steps[:-1], forged)), keys)


def test_open_layer_checks_the_binding(keys: list[tuple[bytes, bytes]]) -> None:
    item = layer(keys[2][1], b"\x05" * PAYLOAD, hop=2)
    step = prove_step(*keys[2], item, chain_id=CHAIN, round_id=ROUND, hop=2)
    opened = open_layer(item, step.shared_secret, keys[2][1], chain_id=CHAIN, round_id=ROUND, hop=2)
    assert opened == b"\x05" * PAYLOAD
    for chain, round_id, hop in (("other", ROUND, 2), (CHAIN, ROUND + 1, 2), (CHAIN, ROUND, 1)):
        with pytest.raises(DecryptionFailed):
            open_layer(
                item, step.shared_secret, keys[2][1], chain_id=chain, round_id=round_id, hop=hop
            )


def test_step_checks_types_and_lengths() -> None:
    item = bytes(96)
    with pytest.raises(BadLength):
        Step(1, item, bytes(31), bytes(96))
    with pytest.raises(BadLength):
        Step(1, item, bytes(32), bytes(95))
    with pytest.raises(BadLength):
        Step(1, b"", bytes(32), bytes(96))
    with pytest.raises(TypeError):
        Step(True, item, bytes(32), bytes(96))
    with pytest.raises(TypeError):
        Step(1, "item", bytes(32), bytes(96))  # type: ignore[arg-type]
    with pytest.raises(BadLength):
        Step(-1, item, bytes(32), bytes(96))
    with pytest.raises(BadLength):
        prove_step(bytes(32), bytes(32), bytes(10), chain_id=CHAIN, round_id=ROUND, hop=1)


# --------------------------------------------------------------------------- ownership proofs


def proven_layer(public_key: bytes, inner: bytes, *, hop: int) -> bytes:
    """A well-formed layer with an ownership proof (what an honest client makes)."""
    return wrap(inner, [public_key], chain_id=CHAIN, round_id=ROUND, first_hop=hop, proven=True)


def garbage_with_proof(hop: int, length: int) -> bytes:
    """A layer of the right length whose ciphertext is random bytes, with a valid ownership
    proof for them: its maker knows the ephemeral secret, but nothing opens."""
    key = new_ephemeral()
    ciphertext = bytes(range(256))[: length - 80] if length - 80 <= 256 else bytes(length - 80)
    binding = binding_data(chain_id=CHAIN, round_id=ROUND, hop_index=hop)
    return key.public + prove_ownership(key, ciphertext_digest(ciphertext), binding) + ciphertext


def check_proven(acc: Accusation, keys: list[tuple[bytes, bytes]]) -> None:
    verify_accusation(
        acc, publics(keys), chain_id=CHAIN, round_id=ROUND, mixes=MIXES, validator=valid,
        proven=True,
    )  # fmt: skip


def traced_back(
    keys: list[tuple[bytes, bytes]], culprit: bytes, at: int
) -> tuple[Accusation, bytes]:
    """A client hides ``culprit`` (an item for hop ``at``) in a proven onion; the mix at
    ``at`` accuses it and the trace runs back to hop 1. Returns the accusation and the
    hop-1 item."""
    item = culprit
    for hop in reversed(range(1, at)):
        item = proven_layer(keys[hop][1], item, hop=hop)
    step = prove_failure(*keys[at], culprit, chain_id=CHAIN, round_id=ROUND, hop=at)
    acc = Accusation(failure_of(step), (step,))
    path = [item]
    for hop in range(1, at):
        (inner,) = peel_many(
            [path[-1]], PrivateKey(keys[hop][0]), chain_id=CHAIN, round_id=ROUND,
            hop_index=hop, expected_length=len(path[-1]), proven=True,
        )  # fmt: skip
        assert isinstance(inner, bytes)
        path.append(inner)
    assert path[-1] == culprit
    for hop in reversed(range(1, at)):
        step = prove_step(
            *keys[hop], path[hop - 1], chain_id=CHAIN, round_id=ROUND, hop=hop, proven=True
        )
        acc = acc.extended(step)
    return acc, item


@pytest.mark.parametrize("at", [1, 2])
def test_a_garbage_layer_with_a_valid_ownership_proof_is_undecryptable(
    keys: list[tuple[bytes, bytes]], at: int
) -> None:
    culprit = garbage_with_proof(at, onion_length(PAYLOAD, MIXES - at, proven=True))
    assert owned(culprit, chain_id=CHAIN, round_id=ROUND, hop=at)
    acc, first = traced_back(keys, culprit, at)
    assert acc.failure is Failure.UNDECRYPTABLE and acc.steps[-1].revealed
    assert acc.hop == 1 and acc.item == first
    check_proven(acc, keys)
    with pytest.raises(InvalidEvidence, match="ownership"):
        check(acc, keys)  # a chain without ownership proofs takes no such accusation
    with pytest.raises(InvalidEvidence):
        check_proven(replace(acc, failure=Failure.NO_OWNER), keys)


@pytest.mark.parametrize("at", [1, 2])
def test_a_garbage_layer_without_an_ownership_proof_reveals_nothing(
    keys: list[tuple[bytes, bytes]], at: int
) -> None:
    length = onion_length(PAYLOAD, MIXES - at, proven=True)
    honest = proven_layer(keys[at][1], b"\x01" * (length - 96), hop=at)
    # the Diffie–Hellman oracle attempt: an honest layer's E and proof over other bytes
    culprit = honest[:80] + bytes(length - 80)
    assert not owned(culprit, chain_id=CHAIN, round_id=ROUND, hop=at)
    acc, _ = traced_back(keys, culprit, at)
    assert acc.failure is Failure.NO_OWNER
    assert not acc.steps[-1].revealed  # no secret for the copied E
    check_proven(acc, keys)


def test_an_honest_layer_cannot_be_accused_of_failing(keys: list[tuple[bytes, bytes]]) -> None:
    length = onion_length(PAYLOAD, 1, proven=True)
    honest = proven_layer(keys[2][1], b"\x01" * (length - 96), hop=2)
    assert owned(honest, chain_id=CHAIN, round_id=ROUND, hop=2)
    with pytest.raises(ValueError, match="authenticates"):
        prove_failure(*keys[2], honest, chain_id=CHAIN, round_id=ROUND, hop=2)
    # a mix that claims it anyway cannot make the evidence hold
    step = prove_step(*keys[2], honest, chain_id=CHAIN, round_id=ROUND, hop=2, proven=True)
    with pytest.raises(InvalidEvidence, match="authenticates"):
        check_proven(Accusation(Failure.UNDECRYPTABLE, (step,)), keys)
    with pytest.raises(InvalidEvidence, match="ownership proof holds"):
        check_proven(Accusation(Failure.NO_OWNER, (Step(2, honest, b"", b""),)), keys)
    # and a step without a secret is only the end of a no-owner accusation
    with pytest.raises(InvalidEvidence, match="reveals no secret"):
        check_proven(Accusation(Failure.UNDECRYPTABLE, (Step(2, honest, b"", b""),)), keys)


def test_proven_onions_peel_through_and_prove_steps(keys: list[tuple[bytes, bytes]]) -> None:
    onion = wrap(b"\xff" * PAYLOAD, [pk for _, pk in keys[1:]], chain_id=CHAIN,
                 round_id=ROUND, first_hop=1, proven=True)  # fmt: skip
    assert len(onion) == onion_length(PAYLOAD, MIXES - 1, proven=True)
    (item2,) = peel_many(
        [onion], PrivateKey(keys[1][0]), chain_id=CHAIN, round_id=ROUND, hop_index=1,
        expected_length=len(onion), proven=True,
    )  # fmt: skip
    assert isinstance(item2, bytes)
    (payload,) = peel_many(
        [item2], PrivateKey(keys[2][0]), chain_id=CHAIN, round_id=ROUND, hop_index=2,
        expected_length=len(item2), proven=True,
    )  # fmt: skip
    assert payload == b"\xff" * PAYLOAD
    last = prove_step(*keys[2], item2, chain_id=CHAIN, round_id=ROUND, hop=2, proven=True)
    acc = Accusation(Failure.INVALID_PAYLOAD, (last,)).extended(
        prove_step(*keys[1], onion, chain_id=CHAIN, round_id=ROUND, hop=1, proven=True)
    )
    check_proven(acc, keys)


def test_step_without_secret_needs_both_empty() -> None:
    with pytest.raises(BadLength):
        Step(1, b"item", b"", bytes(96))
    assert not Step(1, b"item", b"", b"").revealed


# --------------------------------------------------------------------------- duplicates


def twin_accusations(keys: list[tuple[bytes, bytes]]) -> tuple[list[Accusation], bytes]:
    """Two hop-1 items whose layers (made apart) hold the same hop-2 onion: mix 2's
    ``duplicate`` accusation about each; and a third, honest hop-1 item."""
    (sk1, pk1), (_, pk2) = keys[1], keys[2]
    inner = layer(pk2, b"\x01" * PAYLOAD, hop=2)
    twins = [layer(pk1, inner, hop=1) for _ in range(2)]
    assert twins[0] != twins[1]
    accs = [
        Accusation(
            Failure.DUPLICATE,
            (prove_step(sk1, pk1, item, chain_id=CHAIN, round_id=ROUND, hop=1),),
        )
        for item in twins
    ]
    return accs, layer(pk1, layer(pk2, b"\x02" * PAYLOAD, hop=2), hop=1)


def verify_all(accs: list[Accusation], keys: list[tuple[bytes, bytes]]) -> list[bool]:
    return verify_accusations(
        accs, publics(keys), chain_id=CHAIN, round_id=ROUND, mixes=MIXES, validator=valid
    )


def test_a_duplicate_holds_only_with_its_twin(keys: list[tuple[bytes, bytes]]) -> None:
    accs, honest = twin_accusations(keys)
    assert verify_all(accs, keys) == [True, True]
    assert verify_all(accs[:1], keys) == [False]  # a duplicate of nothing
    assert verify_all([accs[0], accs[0]], keys) == [False, False]  # one input named twice
    sk1, pk1 = keys[1]
    other = Accusation(
        Failure.DUPLICATE,
        (prove_step(sk1, pk1, honest, chain_id=CHAIN, round_id=ROUND, hop=1),),
    )
    assert verify_all([accs[0], other], keys) == [False, False]  # they hold different onions
    assert verify_all([*accs, other], keys) == [True, True, False]


def test_a_duplicate_is_only_shown_between_the_first_and_last_mix(
    keys: list[tuple[bytes, bytes]],
) -> None:
    sk, pk = keys[2]
    items = [layer(pk, b"\x01" * PAYLOAD, hop=2) for _ in range(2)]
    last = [  # equal plaintexts at the last mix are legitimate
        Accusation(
            Failure.DUPLICATE, (prove_step(sk, pk, i, chain_id=CHAIN, round_id=ROUND, hop=2),)
        )
        for i in items
    ]
    assert verify_all(last, keys) == [False, False]
    with pytest.raises(InvalidEvidence, match="between the first and last"):
        check(last[0], keys)


def test_a_duplicate_with_a_forged_step_pairs_with_nothing(
    keys: list[tuple[bytes, bytes]],
) -> None:
    accs, _ = twin_accusations(keys)
    assert all(a.hop == 1 for a in accs)
    forged = Accusation(Failure.DUPLICATE, (replace(accs[1].steps[0], proof=bytes(96)),))
    assert verify_all([accs[0], forged], keys) == [False, False]
