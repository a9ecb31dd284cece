"""Signed chunks in the round machines: checking inbound chunks, deliveries attached to
accusations, and judging a blame from its evidence (mixnet.core.deliveries)."""

from __future__ import annotations

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

    return ChunkSigning("c", NAMES[:mixes], IDENTITIES, sign)


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
    assert judge(
        Accusation(Failure.NO_OWNER, (Step(1, items[2], b"", b""),), found[items[2]]),
        True, signing_for("mix3"), R,
    ) == "mix1"  # fmt: skip


def test_deliveries_prove_who_sent_each_item() -> None:
    items = [item(RELAY_ITEM) for _ in range(5)]
    received = {0: ReceivedChunk("mix1", 0, tuple(items), signed(items))}
    found = deliveries(received, [items[3], b"unknown"])
    assert set(found) == {items[3]} and found[items[3]].position == 3
    signing = signing_for("mix3")
    accusation = Accusation(Failure.NO_OWNER, (Step(1, items[3], b"", b""),), found[items[3]])
    assert judge(accusation, True, signing, R) == "mix1"  # it signed a provably bad item
    assert judge(accusation, False, signing, R) == "mix2"  # the evidence does not hold
    assert judge(accusation.delivered(None), True, signing, R) == "mix2"  # no delivery
    other = Accusation(Failure.NO_OWNER, (Step(1, items[2], b"", b""),), found[items[3]])
    assert judge(other, True, signing, R) == "mix2"  # a delivery of another item
    assert judge(accusation, True, signing, R + 1) == "mix2"  # of another round


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
    verify = one(m.on_reply(Trace(R), Accused(R, (accusation,)), NOW), Verify)
    assert not m.rounds[R].chunk_inputs  # read back from the store for the trace:
    prove = one(read_back(m, m.verified(verify.token, [True], NOW)), Prove)
    mine = Step(1, items[1], bytes(32), bytes(96))
    (reply,) = m.proved(prove.token, [mine], NOW)
    assert isinstance(reply, Reply) and isinstance(reply.frame, Accused)
    (extended,) = reply.frame.accusations
    assert extended.steps == (mine, *accusation.steps)
    assert extended.delivery is not None and extended.delivery.position == 1
    assert judge(extended, True, signing_for("mix1"), R) == "mix1"  # provable, by its sender


def test_an_accusation_that_does_not_hold_is_the_evidence_of_the_blame() -> None:
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items)
    m.on_trace(Trace(R), NOW)
    made_up = Accusation(Failure.NO_OWNER, (Step(2, b"\x01" * (RELAY_ITEM - LAYER), b"", b""),))
    verify = one(m.on_reply(Trace(R), Accused(R, (made_up,)), NOW), Verify)
    assert read_back(m, m.verified(verify.token, [True], NOW)) == [  # holds, but names none of ours
        Reply(Accused(R, blame="mix3", evidence=made_up))
    ]


def test_a_blame_from_downstream_is_judged_from_its_evidence() -> None:
    """mix2 (hop 1 of 4) hears that mix3 refused mix4's accusation: it checks the evidence
    and names whoever it convicts."""
    items = [item(RELAY_ITEM) for _ in range(3)]
    m = forwarded(items, mixes=4)
    m.on_trace(Trace(R), NOW)
    evidence = Accusation(Failure.NO_OWNER, (Step(3, b"\x02" * 40, b"", b""),))
    reply = Accused(R, blame="mix4", evidence=evidence)
    verify = one(m.on_reply(Trace(R), reply, NOW), Verify)
    assert isinstance(verify.token, BlameChecked) and list(verify.accusations) == [evidence]
    # the evidence holds but carries no delivery by mix3: the accuser, mix4, is named
    assert m.verified(verify.token, [True], NOW) == [
        Reply(Accused(R, blame="mix4", evidence=evidence))
    ]
    # a blame without evidence is passed on as it is
    plain = one(m.on_reply(Trace(R), Accused(R, blame="mix4"), NOW), Reply)
    assert plain == Reply(Accused(R, blame="mix4"))


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


@pytest.mark.parametrize(("holds", "named"), [(False, "mix3"), (True, "mix3")])
def test_the_entry_mix_judges_a_blame_from_its_evidence(holds: bool, named: str) -> None:
    m = forwarded_entry()
    evidence = Accusation(Failure.NO_OWNER, (Step(2, b"\x02" * 40, b"", b""),))
    verify = one(m.on_reply(Trace(1), Accused(1, blame="mix3", evidence=evidence), NOW), Verify)
    assert isinstance(verify.token, BlameJudged)
    (abort,) = m.verified(verify.token, [holds], NOW)
    assert isinstance(abort, Send) and isinstance(abort.frame, Exclude)
    assert abort.frame.abort == f"mix {named} could not back its accusations"


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
    verify = one(restarted.on_reply(Trace(R), Accused(R, (accusation,)), NOW), Verify)
    (load,) = restarted.verified(verify.token, [True], NOW)
    assert isinstance(load, LoadIntake) and load.round_id == R
    prove = one(restarted.intake_loaded(load.token, disk.records().chunks[R], NOW), Prove)
    assert list(prove.items) == [items[2]]  # the input, read back from the store
    mine = Step(1, items[2], bytes(32), bytes(96))
    (reply,) = restarted.proved(prove.token, [mine], NOW)
    assert isinstance(reply, Reply) and isinstance(reply.frame, Accused)
    (extended,) = reply.frame.accusations
    assert extended.delivery is not None and extended.delivery.position == 2
    assert judge(extended, True, signing_for("mix1"), R) == "mix1"
