"""Signed chunks in the round machines: checking inbound chunks, deliveries attached to
accusations, and judging a blame from its evidence (mixnet.core.deliveries)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from nacl.signing import SigningKey

from mixnet.blame import Accusation, Failure, Step
from mixnet.chunk_signature import sign_chunk
from mixnet.core.actions import LoadIntake, Mix, Peel, Persist, Prove, Reply, Send, Verify
from mixnet.core.deliveries import ChunkSigning, ReceivedChunk, deliveries, judge
from mixnet.core.entry import EntryMachine
from mixnet.core.items import Items
from mixnet.core.records import AddChunk, NewRound, OutboundBatch, OutboundChunk
from mixnet.core.relay import RelayMachine
from mixnet.core.status import RoundStatus as S
from mixnet.core.trace_tokens import BlameChecked
from mixnet.core.verdict import BlameJudged
from mixnet.errors import BadSignature
from mixnet.frames import Accused, Batch, BatchAck, Exclude, OpenRound, RoundKeys, Trace
from mixnet.trace_signature import PageProof, page_proof, sign_page, sign_refusal
from tests.mixnet.chain_harness import MemoryStore
from tests.mixnet.test_machines import (
    LAYER,
    NOW,
    RELAY_ITEM,
    Keys,
    announcement,
    item,
    one,
    open_entry,
    read_back,
    store,
    stored,
    submit_frame,
)

R = 5
KEYS = {
    name: SigningKey(bytes([i + 1]) * 32) for i, name in enumerate(("mix1", "mix2", "mix3", "mix4"))
}
IDENTITIES = {name: bytes(key.verify_key) for name, key in KEYS.items()}


NAMES = ("mix1", "mix2", "mix3", "mix4")


def signing_for(name: str, mixes: int = 3) -> ChunkSigning:
    def sign(round_id: int, index: int, items: object) -> bytes:
        return sign_chunk(KEYS[name], chain_id="c", round_id=round_id, sender=name, index=index,
                          items=list(items))  # type: ignore[call-overload]  # fmt: skip

    return ChunkSigning("c", NAMES[:mixes], IDENTITIES, sign, message_signer(name))


def message_signer(name: str) -> Callable[[bytes], bytes]:
    return lambda message: bytes(KEYS[name].sign(message).signature)


def page(*accusations: Accusation, by: str = "mix3", round_id: int = R) -> Accused:
    """An ``accused`` page of ``accusations`` signed by ``by``."""
    signature = sign_page(message_signer(by), accusations, chain_id="c", round_id=round_id,
                          signer=by)  # fmt: skip
    return Accused(round_id, accusations, signature=signature)


def evidence_of(
    evidence: Accusation, *, accuser: str | None, refuser: str | None, round_id: int = R
) -> tuple[PageProof | None, bytes | None]:
    """The proof that ``evidence`` was on a page ``accuser`` signed and ``refuser``'s
    signature over its refusal (``None``: not signed by anyone)."""
    proof = None
    if accuser is not None:
        proof = page_proof([evidence], 0, page(evidence, by=accuser, round_id=round_id).signature
                           or b"")  # fmt: skip
    refusal = None
    if refuser is not None:
        refusal = sign_refusal(message_signer(refuser), evidence, chain_id="c", round_id=round_id,
                               refuser=refuser)  # fmt: skip
    return proof, refusal


def judged(
    evidence: Accusation,
    holds: bool,
    signing: ChunkSigning,
    round_id: int = R,
    *,
    accuser: str | None = "",
    refuser: str | None = "",
    reporter: str = "",
) -> str:
    """Whom :func:`judge` names for ``evidence`` signed, by default, as honest mixes sign it
    (its accuser over its page, the mix before over the refusal)."""
    accuser = signing.name_at(evidence.hop) if accuser == "" else accuser
    refuser = signing.name_at(evidence.hop - 1) if refuser == "" else refuser
    proof, refusal = evidence_of(evidence, accuser=accuser, refuser=refuser, round_id=round_id)
    return judge(evidence, holds, signing, round_id, proof=proof, refusal=refusal,
                 reporter=reporter).name  # fmt: skip


def signed(items: list[bytes], sender: str = "mix1", index: int = 0) -> bytes:
    return sign_chunk(KEYS[sender], chain_id="c", round_id=R, sender=sender, index=index,
                      items=items)  # fmt: skip


def batch(items: list[bytes], signature: bytes | None) -> Batch:
    return Batch(R, "mix1", 0, 1, len(items), len(items), tuple(items), 0, signature)


def relay(mixes: int = 3) -> RelayMachine:
    m = RelayMachine(
        name="mix2", predecessor="mix1", item_length=RELAY_ITEM, chunk_size=8,
        keys=Keys("mix2", 2), hop=1, successor="mix3", signing=signing_for("mix2", mixes),
    )  # fmt: skip
    m.on_open_round(OpenRound(R), NOW)
    later = tuple(announcement(NAMES[i], i + 1, R) for i in range(2, mixes))
    m.on_reply(OpenRound(R), RoundKeys(R, later), NOW)
    return m


def test_an_inbound_chunk_must_carry_the_senders_signature() -> None:
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = relay()
    with pytest.raises(BadSignature, match="not signed"):
        m.on_batch(batch(items, None))
    with pytest.raises(BadSignature, match="does not verify"):
        m.on_batch(batch(items, signed(items[:2])))
    with pytest.raises(BadSignature):
        m.on_batch(batch(items, signed(items, sender="mix3")))
    assert not m.rounds[R].received
    peel = one(m.on_batch(batch(items, signed(items))), Peel)
    persist = one(m.peeled(peel.token, [i[:-LAYER] for i in items], NOW), Persist)
    (write,) = persist.writes
    assert isinstance(write, AddChunk)  # stored as signed, for the trace: not held in memory
    assert write.chunk.signature == signed(items) and list(write.chunk.inputs) == items
    assert not write.chunk.received  # the inputs are the chunk whole
    assert not m.rounds[R].received and not m.rounds[R].chunk_inputs


def test_a_chunk_with_a_replay_is_stored_whole_as_signed() -> None:
    """An item dropped as a replay leaves the inputs short of the chunk as signed: the
    chunk is stored as received too, and read back as the delivery of its other items."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    items.append(items[0])  # a replay within the chunk
    m = relay()
    peel = one(m.on_batch(batch(items, signed(items))), Peel)
    assert list(peel.items) == items[:3]
    persist = one(m.peeled(peel.token, [i[:-LAYER] for i in items[:3]], NOW), Persist)
    (write,) = persist.writes
    assert isinstance(write, AddChunk)
    assert list(write.chunk.received) == items and list(write.chunk.inputs) == items[:3]
    assert write.chunk.as_received() == write.chunk.received
    found = deliveries({0: ReceivedChunk("mix1", 0, write.chunk.as_received(),
                                         write.chunk.signature)}, [items[2]])  # fmt: skip
    assert judged(
        Accusation(Failure.NO_OWNER, (Step(1, items[2], b"", b""),), found[items[2]]),
        True, signing_for("mix3"),
    ) == "mix1"  # fmt: skip


def test_deliveries_prove_who_sent_each_item() -> None:
    items = [item(RELAY_ITEM) for _ in range(5)]
    received = {0: ReceivedChunk("mix1", 0, tuple(items), signed(items))}
    found = deliveries(received, [items[3], b"unknown"])
    assert set(found) == {items[3]} and found[items[3]].position == 3
    signing = signing_for("mix3")
    accusation = Accusation(Failure.NO_OWNER, (Step(1, items[3], b"", b""),), found[items[3]])
    assert judged(accusation, True, signing) == "mix1"  # it signed a provably bad item
    assert judged(accusation, False, signing) == "mix2"  # the evidence does not hold
    assert judged(accusation.delivered(None), True, signing) == "mix2"  # no delivery
    other = Accusation(Failure.NO_OWNER, (Step(1, items[2], b"", b""),), found[items[3]])
    assert judged(other, True, signing) == "mix2"  # a delivery of another item
    assert judged(accusation, True, signing, R + 1) == "mix2"  # of another round


def forwarded(items: list[bytes], mixes: int = 3) -> RelayMachine:
    """mix2 with ``items`` received (signed by mix1), peeled, mixed in order and forwarded."""
    m = relay(mixes)
    peel = one(m.on_batch(batch(items, signed(items))), Peel)
    persist = one(m.peeled(peel.token, [i[:-LAYER] for i in items], NOW), Persist)
    stored(m, persist)
    mix = one(m.persisted(persist.token, NOW), Mix)
    sent = one(m.mixed(R, [list(mix.payloads)]), Send).frame
    assert isinstance(sent, Batch)
    m.on_reply(sent, BatchAck(R, 0), NOW)
    return m


def test_a_proven_step_carries_the_predecessors_delivery() -> None:
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items)
    m.on_trace(Trace(R), NOW)
    out = items[1][:-LAYER]
    accusation = Accusation(Failure.INVALID_PAYLOAD, (Step(2, out, bytes(32), bytes(96)),))
    verify = one(m.on_reply(Trace(R), page(accusation), NOW), Verify)
    assert not m.rounds[R].chunk_inputs  # read back from the store for the trace:
    prove = one(read_back(m, m.verified(verify.token, [True], NOW)), Prove)
    mine = Step(1, items[1], bytes(32), bytes(96))
    (reply,) = m.proved(prove.token, [mine], NOW)
    assert isinstance(reply, Reply) and isinstance(reply.frame, Accused)
    (extended,) = reply.frame.accusations
    assert extended.steps == (mine, *accusation.steps)
    assert extended.delivery is not None and extended.delivery.position == 1
    assert reply.frame == page(extended, by="mix2")  # signed by the relay that sends it
    assert judged(extended, True, signing_for("mix1")) == "mix1"  # provable, by its sender


def test_an_accusation_that_does_not_hold_is_the_evidence_of_the_blame() -> None:
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items)
    m.on_trace(Trace(R), NOW)
    made_up = Accusation(Failure.NO_OWNER, (Step(2, b"\x01" * (RELAY_ITEM - LAYER), b"", b""),))
    verify = one(m.on_reply(Trace(R), page(made_up), NOW), Verify)
    proof, refusal = evidence_of(made_up, accuser="mix3", refuser="mix2")
    assert read_back(m, m.verified(verify.token, [True], NOW)) == [  # holds, but names none of ours
        Reply(Accused(R, blame="mix3", evidence=made_up, proof=proof, refusal=refusal))
    ]
    # anyone can check that mix3 made it and mix2 refused it: mix3 is named
    assert judged(made_up, True, signing_for("mix1"), reporter="mix2") == "mix3"


def test_a_page_its_sender_did_not_sign_is_blamed_without_evidence() -> None:
    """Accusations on a page without the successor's valid signature prove nothing to anyone
    else: the relay does not check them and blames the successor on its own word (the entry
    mix then reports the blame as unprovable)."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    out = items[1][:-LAYER]
    accusation = Accusation(Failure.INVALID_PAYLOAD, (Step(2, out, bytes(32), bytes(96)),))
    for unsigned in (
        Accused(R, (accusation,)),
        Accused(R, (accusation,), signature=page(accusation, by="mix2").signature),  # not mix3's
        Accused(R, (accusation,), signature=page(accusation, round_id=R + 1).signature),
        Accused(R, (accusation, accusation), signature=page(accusation).signature),
    ):
        m = forwarded(items)
        m.on_trace(Trace(R), NOW)
        assert m.on_reply(Trace(R), unsigned, NOW) == [Reply(Accused(R, blame="mix3"))]


def test_a_blame_from_downstream_is_judged_from_its_evidence() -> None:
    """mix2 (hop 1 of 4) hears that mix3 refused mix4's accusation: it checks the evidence
    and names whoever it convicts."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items, mixes=4)
    m.on_trace(Trace(R), NOW)
    evidence = Accusation(Failure.NO_OWNER, (Step(3, b"\x02" * 40, b"", b""),))
    proof, refusal = evidence_of(evidence, accuser="mix4", refuser="mix3")
    reply = Accused(R, blame="mix4", evidence=evidence, proof=proof, refusal=refusal)
    verify = one(m.on_reply(Trace(R), reply, NOW), Verify)
    assert isinstance(verify.token, BlameChecked) and list(verify.accusations) == [evidence]
    # the evidence holds but carries no delivery by mix3: the accuser, mix4, is named, and
    # the blame goes back with everything that shows it
    assert m.verified(verify.token, [True], NOW) == [Reply(reply)]
    # a blame without evidence is passed on as it is
    plain = one(m.on_reply(Trace(R), Accused(R, blame="mix4"), NOW), Reply)
    assert plain == Reply(Accused(R, blame="mix4"))


def test_a_refusal_the_refuser_did_not_sign_names_the_reporter() -> None:
    """With four mixes, mix3 (colluding with mix4) reports that the honest mix2... here:
    mix2 (hop 1 of 4) hears from mix3 that mix3 refused mix4's accusation; without mix3's
    signature over that refusal it is mix3's invention: mix3 is named, and the blame goes back
    without the evidence (which, passed on, would make mix2 look like its inventor)."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    evidence = Accusation(Failure.NO_OWNER, (Step(3, b"\x02" * 40, b"", b""),))
    for accuser, refuser in (("mix4", None), ("mix4", "mix2"), ("mix4", "mix4")):
        proof, refusal = evidence_of(evidence, accuser=accuser, refuser=refuser)
        m = forwarded(items, mixes=4)
        m.on_trace(Trace(R), NOW)
        reply = Accused(R, blame="mix3", evidence=evidence, proof=proof, refusal=refusal)
        verify = one(m.on_reply(Trace(R), reply, NOW), Verify)
        assert m.verified(verify.token, [True], NOW) == [Reply(Accused(R, blame="mix3"))]


def test_a_refused_accusation_its_accuser_never_signed_names_the_refuser() -> None:
    """mix3 signs that it refused "mix4's" accusation, which mix4 never signed: mix3 made it up
    (an honest refuser never vouches for an unsigned page), and anyone can see that."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    evidence = Accusation(Failure.NO_OWNER, (Step(3, b"\x02" * 40, b"", b""),))
    for accuser in (None, "mix3"):
        proof, refusal = evidence_of(evidence, accuser=accuser, refuser="mix3")
        m = forwarded(items, mixes=4)
        m.on_trace(Trace(R), NOW)
        reply = Accused(R, blame="mix4", evidence=evidence, proof=proof, refusal=refusal)
        verify = one(m.on_reply(Trace(R), reply, NOW), Verify)
        named = Accused(R, blame="mix3", evidence=evidence, proof=proof, refusal=refusal)
        assert m.verified(verify.token, [False], NOW) == [Reply(named)]


@pytest.mark.parametrize("hop", [1, 2, 4])
def test_evidence_that_would_frame_this_mix_or_nobody_names_the_reporter(hop: int) -> None:
    """Evidence at this mix's own hop, at its successor's (this mix would be the refuser,
    and it refused nothing) or beyond the chain is the reporter's invention."""
    m = forwarded([item(RELAY_ITEM) for _ in range(3)], mixes=4)
    m.on_trace(Trace(R), NOW)
    evidence = Accusation(Failure.NO_OWNER, (Step(hop, b"\x02" * 40, b"", b""),))
    reply = Accused(R, blame="mix2", evidence=evidence)
    assert m.on_reply(Trace(R), reply, NOW) == [Reply(Accused(R, blame="mix3"))]


def forwarded_entry() -> EntryMachine:
    """The entry mix of a 3-mix chain, its batch acknowledged (waiting for the verdict),
    with chunk signing set up."""
    m, _ = open_entry()
    m.signing = ChunkSigning("c", NAMES[:3], IDENTITIES, None)
    m.successor = "mix2"
    for client in ("a", "b", "c"):
        store(m, submit_frame(client))
    payloads = [p for sub in m.rounds[1].submissions.values() for p in sub]
    batch = one(m.mixed(1, [payloads]), Send).frame
    assert m.on_reply(batch, BatchAck(1, 0), NOW)[-1] == Send(Trace(1))
    return m


@pytest.mark.parametrize("hop", [0, 1, 3])
def test_the_entry_mix_refuses_evidence_that_cannot_be_a_later_refusal(hop: int) -> None:
    m = forwarded_entry()
    evidence = Accusation(Failure.NO_OWNER, (Step(hop, b"\x02" * 40, b"", b""),))
    (abort,) = m.on_reply(Trace(1), Accused(1, blame="mix1", evidence=evidence), NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert "reported a blame its evidence does not back" in abort.frame.abort


@pytest.mark.parametrize(
    ("holds", "accuser", "refuser", "reason"),
    [
        (False, "mix3", "mix2", "mix mix3 could not back its accusations"),
        (True, "mix3", "mix2", "mix mix3 could not back its accusations"),  # no delivery
        # mix2 made up an accusation "by mix3" (in a 3-mix chain, the refuser reports)
        (False, None, "mix2", "mix mix2 refused an accusation that mix mix3 did not sign"),
        (False, "mix2", "mix2", "mix mix2 refused an accusation that mix mix3 did not sign"),
        (False, "mix3", None, "mix mix2 refused an accusation without signing its refusal"),
        (True, "mix3", "mix3", "mix mix2 refused an accusation without signing its refusal"),
    ],
)
def test_the_entry_mix_judges_a_blame_from_its_evidence(
    holds: bool, accuser: str | None, refuser: str | None, reason: str
) -> None:
    m = forwarded_entry()
    evidence = Accusation(Failure.NO_OWNER, (Step(2, b"\x02" * 40, b"", b""),))
    proof, refusal = evidence_of(evidence, accuser=accuser, refuser=refuser, round_id=1)
    blame = Accused(1, blame="mix3", evidence=evidence, proof=proof, refusal=refusal)
    verify = one(m.on_reply(Trace(1), blame, NOW), Verify)
    assert isinstance(verify.token, BlameJudged)
    (abort,) = m.verified(verify.token, [holds], NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert abort.frame.abort == reason


def test_the_entry_mix_reports_a_blame_without_evidence_as_unprovable() -> None:
    m = forwarded_entry()
    (abort,) = m.on_reply(Trace(1), Accused(1, blame="mix3"), NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert abort.frame.abort == (
        "mix mix2 reported, without evidence, that mix mix3 could not back its accusations "
        "(a blame without evidence cannot be checked)"
    )


def test_the_entry_mix_refuses_a_page_its_successor_did_not_sign() -> None:
    m = forwarded_entry()
    accusation = Accusation(Failure.NO_OWNER, (Step(1, b"\x02" * 40, b"", b""),))
    (abort,) = m.on_reply(Trace(1), Accused(1, (accusation,)), NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert abort.frame.abort == "mix mix2 sent accusations on a page it did not sign"
    m = forwarded_entry()
    verify = one(m.on_reply(Trace(1), page(accusation, by="mix2", round_id=1), NOW), Verify)
    assert list(verify.accusations) == [accusation]


def test_signatures_made_while_mixing_are_sent_only_with_their_chunks() -> None:
    """``mixed(..., signatures)``: a chunk given as ``Items`` goes out with the signature made
    over it (off the event loop); any other chunk, or one re-made later, is signed anew."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = relay()
    peel = one(m.on_batch(batch(items, signed(items))), Peel)
    persist = one(m.peeled(peel.token, [i[:-LAYER] for i in items], NOW), Persist)
    stored(m, persist)
    mix = one(m.persisted(persist.token, NOW), Mix)
    outputs = Items.of(list(mix.payloads))
    sent = one(m.mixed(R, [outputs], [b"s" * 64]), Send).frame
    assert isinstance(sent, Batch) and sent.signature == b"s" * 64
    m.rounds[R].outbound = OutboundBatch(3, 3, (OutboundChunk(0, tuple(outputs)),))
    again = m._send_next(m.rounds[R])
    frame = one(again, Send).frame
    assert isinstance(frame, Batch)
    expected = sign_chunk(KEYS["mix2"], chain_id="c", round_id=R, sender="mix2", index=0,
                          items=list(outputs))  # fmt: skip
    assert frame.signature == expected
    other = relay()
    peel = one(other.on_batch(batch(items, signed(items))), Peel)
    persist = one(other.peeled(peel.token, [i[:-LAYER] for i in items], NOW), Persist)
    one(other.persisted(persist.token, NOW), Mix)
    sent = one(other.mixed(R, [list(outputs)], [b"s" * 64]), Send).frame  # not Items
    assert isinstance(sent, Batch) and sent.signature == expected


def test_a_restarted_relay_still_backs_its_accusation_with_the_delivery() -> None:
    """A relay holds only its outputs in memory; its inputs and the chunks as signed are on
    disk. Restarted after forwarding, it reads them back for the trace and still shows what
    its predecessor sent: the blame falls on the sender of the bad item, not on the relay
    (until store schema 7 a restarted relay had lost the signed chunks)."""
    disk = MemoryStore()
    kept = disk.kept
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = relay()
    kept([Persist((NewRound(R, S.OPEN, NOW, Keys("mix2", 2).secret(R)),))])  # as on_open_round
    peel = one(m.on_batch(batch(items, signed(items))), Peel)
    persist = one(kept(m.peeled(peel.token, [i[:-LAYER] for i in items], NOW)), Persist)
    mix = one(kept(m.persisted(persist.token, NOW)), Mix)
    sent = one(kept(m.mixed(R, [list(mix.payloads)])), Send).frame
    assert isinstance(sent, Batch)
    kept(m.on_reply(sent, BatchAck(R, 0), NOW))
    assert not m.rounds[R].chunk_inputs and not m.rounds[R].received  # outputs only

    restarted, _ = RelayMachine.restore(
        disk.records(), NOW, name="mix2", predecessor="mix1", item_length=RELAY_ITEM,
        chunk_size=8, keys=Keys("mix2", 2), hop=1, successor="mix3",
        signing=signing_for("mix2"),
    )  # fmt: skip
    assert restarted.status(R) is S.FORWARDED
    assert restarted.on_trace(Trace(R), NOW) == [Send(Trace(R))]
    out = items[2][:-LAYER]
    accusation = Accusation(Failure.INVALID_PAYLOAD, (Step(2, out, bytes(32), bytes(96)),))
    verify = one(restarted.on_reply(Trace(R), page(accusation), NOW), Verify)
    (load,) = restarted.verified(verify.token, [True], NOW)
    assert isinstance(load, LoadIntake) and load.round_id == R
    prove = one(restarted.intake_loaded(load.token, disk.records().chunks[R], NOW), Prove)
    assert list(prove.items) == [items[2]]  # the input, read back from the store
    mine = Step(1, items[2], bytes(32), bytes(96))
    (reply,) = restarted.proved(prove.token, [mine], NOW)
    assert isinstance(reply, Reply) and isinstance(reply.frame, Accused)
    (extended,) = reply.frame.accusations
    assert extended.delivery is not None and extended.delivery.position == 2
    assert judged(extended, True, signing_for("mix1")) == "mix1"


def test_a_refused_duplicate_comes_with_the_page_of_its_twins() -> None:
    """A ``duplicate`` accusation holds only beside its twins: a relay that refuses one sends
    the whole page it was on, and every judge checks the evidence on that page."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items, mixes=4)
    m.on_trace(Trace(R), NOW)
    twins = tuple(Accusation(Failure.DUPLICATE, (Step(2, bytes([i]) * 40, bytes(32), bytes(96)),))
                  for i in (1, 2))  # fmt: skip
    verify = one(m.on_reply(Trace(R), page(*twins), NOW), Verify)
    (refusal,) = read_back(m, m.verified(verify.token, [True, True], NOW))  # none of ours
    assert isinstance(refusal, Reply) and isinstance(refusal.frame, Accused)
    blame = refusal.frame
    assert (blame.blame, blame.evidence, blame.evidence_page) == ("mix3", twins[0], twins)
    assert blame.proof is not None and blame.refusal is not None
    # mix1 (a judge two hops before the accuser) checks the evidence on the whole page
    judge_at = forwarded_entry()
    judge_at.signing = ChunkSigning("c", NAMES[:4], IDENTITIES, None)
    judge_at.hops = 4
    _, signed = evidence_of(twins[0], accuser="mix3", refuser="mix2", round_id=1)
    with_page = Accused(1, blame="mix3", evidence=twins[0], proof=page_proof(
        twins, 0, page(*twins, round_id=1).signature or b""), refusal=signed,
        evidence_page=twins)  # fmt: skip
    checking = one(judge_at.on_reply(Trace(1), with_page, NOW), Verify)
    assert list(checking.accusations) == list(twins)


@pytest.mark.parametrize(
    ("with_page", "results", "named"),
    [
        ("signed", [True, True], "mix3"),  # they pair: mix3 backed it; mix2 has no delivery on it
        ("signed", [False, False], "mix3"),  # a lone duplicate: mix3's own doing
        ("none", [False], "mix2"),  # withheld: only the page shows whether it had a twin
        ("by mix2", [True, True], "mix2"),  # a page mix3 never signed
    ],
)
def test_a_duplicate_blame_is_judged_on_its_page(
    with_page: str, results: list[bool], named: str
) -> None:
    m = forwarded_entry()
    m.signing = ChunkSigning("c", NAMES[:4], IDENTITIES, None)
    m.hops = 4
    twins = tuple(Accusation(Failure.DUPLICATE, (Step(2, bytes([i]) * 40, bytes(32), bytes(96)),))
                  for i in (1, 2))  # fmt: skip
    signer = {"signed": "mix3", "by mix2": "mix2"}.get(with_page)
    proof, refusal = evidence_of(twins[0], accuser="mix3", refuser="mix2", round_id=1)
    evidence_page: tuple[Accusation, ...] = ()
    if signer is not None:
        evidence_page = twins
        proof = page_proof(twins, 0, page(*twins, by=signer, round_id=1).signature or b"")
    blame = Accused(1, blame="mix3", evidence=twins[0], proof=proof, refusal=refusal,
                    evidence_page=evidence_page)  # fmt: skip
    verify = one(m.on_reply(Trace(1), blame, NOW), Verify)
    assert len(verify.accusations) == len(results)
    (abort,) = m.verified(verify.token, results, NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert abort.frame.abort.startswith(f"mix {named} ")
