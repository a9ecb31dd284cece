"""Signed trace pages and refusals (mixnet.trace_signature): what each signature covers, and
that nothing else verifies under it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import Delivery, sign_chunk
from mixnet.errors import BadLength
from mixnet.trace_signature import (
    PageProof,
    accusation_bytes,
    page_proof,
    sign_page,
    sign_refusal,
    verify_on_page,
    verify_page,
    verify_refusal,
)

KEY = SigningKey(b"\x11" * 32)
OTHER = SigningKey(b"\x22" * 32)
IDENTITY = bytes(KEY.verify_key)


def signer(key: SigningKey = KEY) -> Callable[[bytes], bytes]:
    return lambda message: bytes(key.sign(message).signature)


def accusation(
    n: int, *, delivered: bool = True, failure: Failure = Failure.INVALID_PAYLOAD
) -> Accusation:
    steps = (Step(1, bytes([n]) * 60, bytes([n + 1]) * 32, bytes([n + 2]) * 96),
             Step(2, bytes([n + 3]) * 12, bytes([n + 4]) * 32, bytes([n + 5]) * 96))  # fmt: skip
    delivery = Delivery("mix1", n, 7, n % 7, (bytes([n]) * 32,) * 3, b"\x07" * 64)
    return Accusation(failure, steps, delivery if delivered else None)


PAGE = tuple(accusation(i) for i in range(5))


def test_a_page_verifies_for_its_signer_chain_round_and_accusations_only() -> None:
    sig = sign_page(signer(), PAGE, chain_id="c", round_id=3, signer="mix2")
    assert verify_page(IDENTITY, sig, PAGE, chain_id="c", round_id=3, signer="mix2")
    for args in (
        {"chain_id": "d", "round_id": 3, "signer": "mix2"},
        {"chain_id": "c", "round_id": 4, "signer": "mix2"},
        {"chain_id": "c", "round_id": 3, "signer": "mix3"},
    ):
        assert not verify_page(IDENTITY, sig, PAGE, **args)  # type: ignore[arg-type]
    assert not verify_page(IDENTITY, sig, PAGE[:4], chain_id="c", round_id=3, signer="mix2")
    assert not verify_page(IDENTITY, sig, PAGE[::-1], chain_id="c", round_id=3, signer="mix2")
    assert not verify_page(bytes(OTHER.verify_key), sig, PAGE, chain_id="c", round_id=3,
                           signer="mix2")  # fmt: skip
    assert not verify_page(IDENTITY, None, PAGE, chain_id="c", round_id=3, signer="mix2")
    assert not verify_page(IDENTITY, sig[:63], PAGE, chain_id="c", round_id=3, signer="mix2")
    assert not verify_page(b"short", sig, PAGE, chain_id="c", round_id=3, signer="mix2")


def test_every_field_of_an_accusation_is_covered() -> None:
    """Changing any byte an accusation carries (its failure, a step, its delivery or the
    lack of one) changes its canonical bytes, so no signature over it verifies for the other."""
    a = PAGE[0]
    d = a.delivery
    assert d is not None
    step = a.steps[0]
    variants = [
        replace(a, failure=Failure.DUPLICATE),
        replace(a, steps=a.steps[:1]),
        replace(a, steps=(replace(step, hop=0), *a.steps[1:])),
        replace(a, steps=(replace(step, item=step.item[:-1]), *a.steps[1:])),
        replace(a, steps=(replace(step, shared_secret=b"\x00" * 32), *a.steps[1:])),
        replace(a, steps=(replace(step, proof=b"\x00" * 96), *a.steps[1:])),
        a.delivered(None),
        a.delivered(replace(d, sender="mix0")),
        a.delivered(replace(d, index=d.index + 1)),
        a.delivered(replace(d, count=d.count + 1)),
        a.delivered(replace(d, position=d.position + 1)),
        a.delivered(replace(d, path=d.path[:-1])),
        a.delivered(replace(d, signature=b"\x08" * 64)),
    ]
    encoded = {accusation_bytes(v) for v in variants}
    assert len(encoded) == len(variants) and accusation_bytes(a) not in encoded
    sig = sign_refusal(signer(), a, chain_id="c", round_id=1, refuser="mix1")
    for v in variants:
        assert not verify_refusal(IDENTITY, sig, v, chain_id="c", round_id=1, refuser="mix1")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.data())
def test_each_accusation_of_a_signed_page_is_shown_on_it_alone(
    count: int, data: st.DataObject
) -> None:
    page = tuple(accusation(i, delivered=i % 3 != 0) for i in range(count))
    sig = sign_page(signer(), page, chain_id="c", round_id=9, signer="mix3")
    position = data.draw(st.integers(0, count - 1))
    proof = page_proof(page, position, sig)
    assert proof.count == count and proof.position == position
    kw = {"chain_id": "c", "round_id": 9, "signer": "mix3"}
    assert verify_on_page(page[position], proof, IDENTITY, **kw)  # type: ignore[arg-type]
    other = accusation(200)
    assert not verify_on_page(other, proof, IDENTITY, **kw)  # type: ignore[arg-type]
    if count > 1:
        moved = replace(proof, position=(position + 1) % count)
        assert not verify_on_page(page[position], moved, IDENTITY, **kw)  # type: ignore[arg-type]
    assert not verify_on_page(page[position], replace(proof, count=count + 1), IDENTITY,
                              **kw)  # type: ignore[arg-type]  # fmt: skip
    assert not verify_on_page(page[position], None, IDENTITY, **kw)  # type: ignore[arg-type]


def test_signatures_of_one_kind_never_verify_as_another() -> None:
    """Page, refusal and chunk messages are domain-separated: a signature made for one never
    shows another (a page of one accusation has the same Merkle root as a chunk of its
    bytes)."""
    a = PAGE[0]
    page_sig = sign_page(signer(), (a,), chain_id="c", round_id=1, signer="mix1")
    refusal = sign_refusal(signer(), a, chain_id="c", round_id=1, refuser="mix1")
    chunk = sign_chunk(KEY, chain_id="c", round_id=1, sender="mix1", index=0,
                       items=[accusation_bytes(a)])  # fmt: skip
    assert len({page_sig, refusal, chunk}) == 3
    one = page_proof((a,), 0, page_sig)
    for sig in (refusal, chunk):
        assert not verify_page(IDENTITY, sig, (a,), chain_id="c", round_id=1, signer="mix1")
        assert not verify_on_page(a, replace(one, signature=sig), IDENTITY, chain_id="c",
                                  round_id=1, signer="mix1")  # fmt: skip
    for sig in (page_sig, chunk):
        assert not verify_refusal(IDENTITY, sig, a, chain_id="c", round_id=1, refuser="mix1")


def test_a_page_proof_checks_its_shape() -> None:
    with pytest.raises(TypeError):
        PageProof(-1, 0, (), b"\x00" * 64)
    with pytest.raises(TypeError):
        PageProof(1, True, (), b"\x00" * 64)
    with pytest.raises(BadLength):
        PageProof(1, 0, (b"\x00" * 31,), b"\x00" * 64)
    with pytest.raises(BadLength):
        PageProof(1, 0, (), b"\x00" * 63)
    with pytest.raises(IndexError):
        page_proof(PAGE, len(PAGE), b"\x00" * 64)
