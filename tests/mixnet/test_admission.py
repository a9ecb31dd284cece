"""Admission (mixnet.admission): encodings, tokens, submission signatures, the [admission]
table, the submit frame's admission fields, and the entry machine's one-submission-per-
credential rule (also across a restart, from a real sqlite store)."""

from __future__ import annotations

import base64
import struct
import tomllib
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from mixnet.admission import (
    SUBMISSION_DOMAIN,
    TOKEN_DOMAIN,
    TOKEN_LENGTH,
    Admission,
    AdmissionError,
    check_credential_client,
    credential_client_id,
    issue_token,
    parse_admission,
    parse_token,
    sign_submission,
    submission_message,
    token_expires,
    token_message,
    token_text,
    verify_submission,
    verify_token,
)
from mixnet.chain import ChainConfigError, load_chain_config, parse_chain_config
from mixnet.chain_render import render_chain_config
from mixnet.core.actions import Action, Peel, Persist, Reply
from mixnet.core.entry import EntryMachine, Opened
from mixnet.core.intake import submission_digest
from mixnet.core.records import NodeRecords
from mixnet.core.status import RoundStatus
from mixnet.errors import (
    BadLength,
    BadSignature,
    DuplicateClient,
    KeyFileError,
    MalformedFrame,
    Unauthorized,
)
from mixnet.frames import (
    Accepted,
    FrameLimits,
    OpenRound,
    RoundKeys,
    Submit,
    parse_request,
    to_wire,
)
from mixnet.keys import public_key_text
from mixnet.settings import node_settings
from mixnet.store import NodeStore
from mixnet.wire import decode_frame, encode_frame
from tests.mixnet.test_chain import valid_data, write
from tests.mixnet.test_machines import (
    ENTRY_BOX,
    HOPS,
    NOW,
    POLICY,
    Keys,
    box,
    downstream,
    one,
    peel,
)

CHAIN = "demo"
ISSUER = SigningKey(b"\x01" * 32)
ALICE = SigningKey(b"\x02" * 32)
BOB = SigningKey(b"\x03" * 32)
MALLORY = SigningKey(b"\x04" * 32)
DIGEST = bytes(range(32))
M = 2


def lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def pk(key: SigningKey) -> bytes:
    return bytes(key.verify_key)


def signed_submit(
    key: SigningKey,
    round_id: int = 1,
    *,
    sealed: bytes | None = None,
    token: bytes | None = None,
    chain_id: str = CHAIN,
) -> Submit:
    """A submit frame signed by ``key`` (client id = its credential)."""
    items = sealed if sealed is not None else box()
    digest = submission_digest(items)
    return Submit(
        round_id,
        credential_client_id(pk(key)),
        items,
        credential=pk(key),
        token=token,
        signature=sign_submission(key, chain_id=chain_id, round_id=round_id, digest=digest),
    )


# =========================================================================== encodings


def test_token_message_layout() -> None:
    expected = (
        lp(b"mixnet/admission-token/v1")
        + lp(b"demo")
        + lp(pk(ALICE))
        + (1_700_000_000).to_bytes(8, "big")
    )
    assert TOKEN_DOMAIN == b"mixnet/admission-token/v1"
    assert token_message(CHAIN, pk(ALICE), 1_700_000_000) == expected


def test_submission_message_layout() -> None:
    expected = lp(b"mixnet/submission/v1") + lp(b"demo") + (7).to_bytes(8, "big") + lp(DIGEST)
    assert SUBMISSION_DOMAIN == b"mixnet/submission/v1"
    assert submission_message(CHAIN, 7, DIGEST) == expected


def test_a_token_is_the_issuer_signature_then_the_expiry() -> None:
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE), expires=1234)
    assert len(token) == TOKEN_LENGTH == 72
    assert token[64:] == (1234).to_bytes(8, "big")
    ISSUER.verify_key.verify(token_message(CHAIN, pk(ALICE), 1234), token[:64])
    assert token_expires(token) == 1234
    forever = issue_token(ISSUER, chain_id=CHAIN, credential=ALICE.verify_key)
    assert forever[64:] == bytes(8) and token_expires(forever) is None
    assert parse_token(token_text(token)) == token
    assert len(token_text(token)) == 96


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("not base64!", "base64"), (base64.b64encode(b"x" * 71).decode(), "72 bytes")],
)
def test_bad_token_text_is_refused_without_echo(text: str, fragment: str) -> None:
    with pytest.raises(KeyFileError, match=fragment) as info:
        parse_token(text)
    assert text not in str(info.value)


def test_encodings_check_types_and_lengths() -> None:
    with pytest.raises(BadLength):
        token_message(CHAIN, b"x" * 31, 0)
    with pytest.raises(MalformedFrame):
        credential_client_id("not bytes")  # type: ignore[arg-type]
    with pytest.raises(BadLength):
        submission_message(CHAIN, 1, b"short")
    with pytest.raises(ValueError, match="round_id"):
        submission_message(CHAIN, -1, DIGEST)
    with pytest.raises(ValueError, match="chain_id"):
        submission_message("", 1, DIGEST)
    with pytest.raises(ValueError, match="expires"):
        issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE), expires=-5)
    with pytest.raises(TypeError):
        issue_token(ALICE.verify_key, chain_id=CHAIN, credential=pk(ALICE))  # type: ignore[arg-type]


def test_the_client_id_of_a_credential_is_its_chain_file_text() -> None:
    assert credential_client_id(pk(ALICE)) == public_key_text(ALICE.verify_key)
    check_credential_client(public_key_text(ALICE.verify_key), pk(ALICE))
    with pytest.raises(Unauthorized):
        check_credential_client("alice", None)
    with pytest.raises(MalformedFrame):
        check_credential_client("alice", pk(ALICE))


# =========================================================================== tokens


def test_a_valid_token_admits_its_credential() -> None:
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE), expires=2000)
    verify_token(ISSUER.verify_key, token, chain_id=CHAIN, credential=pk(ALICE), now=1999.9)


def test_a_forged_token_is_refused() -> None:
    forged = issue_token(MALLORY, chain_id=CHAIN, credential=pk(ALICE))
    with pytest.raises(Unauthorized):
        verify_token(ISSUER.verify_key, forged, chain_id=CHAIN, credential=pk(ALICE), now=NOW)
    garbage = bytes(64) + bytes(8)
    with pytest.raises(Unauthorized):
        verify_token(ISSUER.verify_key, garbage, chain_id=CHAIN, credential=pk(ALICE), now=NOW)


def test_a_token_of_another_chain_is_refused() -> None:
    token = issue_token(ISSUER, chain_id="other", credential=pk(ALICE))
    with pytest.raises(Unauthorized):
        verify_token(ISSUER.verify_key, token, chain_id=CHAIN, credential=pk(ALICE), now=NOW)


def test_a_token_replayed_for_another_credential_is_refused() -> None:
    alices = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE))
    with pytest.raises(Unauthorized):
        verify_token(ISSUER.verify_key, alices, chain_id=CHAIN, credential=pk(BOB), now=NOW)


def test_a_token_with_a_changed_expiry_is_refused() -> None:
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE), expires=2000)
    extended = token[:64] + (9999).to_bytes(8, "big")
    with pytest.raises(Unauthorized):
        verify_token(ISSUER.verify_key, extended, chain_id=CHAIN, credential=pk(ALICE), now=NOW)


def test_an_expired_token_is_refused() -> None:
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE), expires=2000)
    for now in (2000.0, 2000.5, 1e12):
        with pytest.raises(Unauthorized, match="expired"):
            verify_token(ISSUER.verify_key, token, chain_id=CHAIN, credential=pk(ALICE), now=now)


def test_token_lengths_are_checked_before_crypto() -> None:
    with pytest.raises(BadLength):
        verify_token(ISSUER.verify_key, b"x" * 71, chain_id=CHAIN, credential=pk(ALICE), now=NOW)
    with pytest.raises(MalformedFrame):
        verify_token(
            ISSUER.verify_key, "x" * 72, chain_id=CHAIN, credential=pk(ALICE), now=NOW  # type: ignore[arg-type]
        )


# =========================================================================== signatures


def test_a_submission_signature_verifies_for_its_chain_round_and_digest() -> None:
    sig = sign_submission(ALICE, chain_id=CHAIN, round_id=3, digest=DIGEST)
    verify_submission(pk(ALICE), sig, chain_id=CHAIN, round_id=3, digest=DIGEST)


@pytest.mark.parametrize(
    ("chain_id", "round_id", "digest"),
    [
        ("other", 3, DIGEST),  # wrong chain
        (CHAIN, 4, DIGEST),  # wrong round
        (CHAIN, 3, bytes(32)),  # another box
    ],
)
def test_a_signature_for_something_else_is_refused(
    chain_id: str, round_id: int, digest: bytes
) -> None:
    sig = sign_submission(ALICE, chain_id=CHAIN, round_id=3, digest=DIGEST)
    with pytest.raises(BadSignature):
        verify_submission(pk(ALICE), sig, chain_id=chain_id, round_id=round_id, digest=digest)


def test_a_forged_signature_is_refused() -> None:
    sig = sign_submission(MALLORY, chain_id=CHAIN, round_id=3, digest=DIGEST)
    with pytest.raises(BadSignature):
        verify_submission(pk(ALICE), sig, chain_id=CHAIN, round_id=3, digest=DIGEST)
    with pytest.raises(BadSignature):
        verify_submission(pk(ALICE), bytes(64), chain_id=CHAIN, round_id=3, digest=DIGEST)


def test_signature_lengths_are_checked_before_crypto() -> None:
    with pytest.raises(BadLength):
        verify_submission(pk(ALICE), b"s" * 63, chain_id=CHAIN, round_id=3, digest=DIGEST)
    with pytest.raises(BadLength):
        verify_submission(b"k" * 33, b"s" * 64, chain_id=CHAIN, round_id=3, digest=DIGEST)


# =========================================================================== Admission


def test_admission_needs_someone_to_admit_and_refuses_bad_keys() -> None:
    with pytest.raises(AdmissionError, match="admits nobody"):
        Admission()
    with pytest.raises(AdmissionError) as info:
        Admission(clients=(pk(ALICE), b"short"))
    assert info.value.field == "clients[1]"
    with pytest.raises(AdmissionError, match="repeats clients\\[0\\]") as info:
        Admission(clients=(pk(ALICE), pk(BOB), pk(ALICE)))
    assert info.value.field == "clients[2]"
    with pytest.raises(AdmissionError) as info:
        Admission(issuer=pk(ISSUER))  # type: ignore[arg-type]
    assert info.value.field == "issuer"
    listed = Admission(clients=(ALICE.verify_key, pk(BOB)))  # type: ignore[arg-type]
    assert listed.clients == (pk(ALICE), pk(BOB))
    assert hash(listed) == hash(Admission(clients=(pk(ALICE), pk(BOB))))


def test_admission_check_of_a_listed_client() -> None:
    admission = Admission(clients=(pk(ALICE),))
    frame = signed_submit(ALICE)
    admission.check(frame, chain_id=CHAIN, digest=submission_digest(frame.box), now=NOW)
    bob = signed_submit(BOB)
    with pytest.raises(Unauthorized, match="not admitted"):
        admission.check(bob, chain_id=CHAIN, digest=submission_digest(bob.box), now=NOW)


def test_admission_check_of_a_client_with_a_token() -> None:
    admission = Admission(issuer=ISSUER.verify_key)
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(BOB), expires=int(NOW) + 60)
    frame = signed_submit(BOB, token=token)
    digest = submission_digest(frame.box)
    admission.check(frame, chain_id=CHAIN, digest=digest, now=NOW)
    with pytest.raises(Unauthorized, match="expired"):
        admission.check(frame, chain_id=CHAIN, digest=digest, now=NOW + 60)
    bare = signed_submit(BOB)
    with pytest.raises(Unauthorized, match="no admission token"):
        admission.check(bare, chain_id=CHAIN, digest=submission_digest(bare.box), now=NOW)
    replayed = signed_submit(MALLORY, token=token)  # Bob's token, Mallory's key
    with pytest.raises(Unauthorized):
        admission.check(replayed, chain_id=CHAIN, digest=submission_digest(replayed.box), now=NOW)


def test_admission_check_refuses_what_is_not_signed_right() -> None:
    admission = Admission(clients=(pk(ALICE),), issuer=ISSUER.verify_key)
    frame = signed_submit(ALICE)
    digest = submission_digest(frame.box)
    cases: list[tuple[Submit, type[Exception], bytes]] = [
        # no credential at all
        (Submit(1, "alice", frame.box), Unauthorized, digest),
        # Alice's credential, Mallory's signature
        (
            Submit(1, frame.client, frame.box, credential=pk(ALICE),
                   signature=signed_submit(MALLORY, sealed=frame.box).signature),
            BadSignature,
            digest,
        ),
        # signed for round 1, sent as round 2
        (Submit(2, frame.client, frame.box, credential=pk(ALICE), signature=frame.signature),
         BadSignature, digest),
        # signed for another chain
        (signed_submit(ALICE, sealed=frame.box, chain_id="other"), BadSignature, digest),
        # the box was changed after signing
        (frame, BadSignature, bytes(32)),
        # a client id that is not the credential
        (Submit(1, "alice", frame.box, credential=pk(ALICE), signature=frame.signature),
         MalformedFrame, digest),
        # a signature of the wrong length
        (Submit(1, frame.client, frame.box, credential=pk(ALICE), signature=b"s" * 63),
         BadLength, digest),
        # a credential without its signature
        (Submit(1, frame.client, frame.box, credential=pk(ALICE)), MalformedFrame, digest),
    ]  # fmt: skip
    for submit, error, claimed in cases:
        with pytest.raises(error):
            admission.check(submit, chain_id=CHAIN, digest=claimed, now=NOW)


# =========================================================================== the table


def test_parse_admission_table() -> None:
    table = {
        "clients": [public_key_text(ALICE.verify_key)],
        "issuer": public_key_text(ISSUER.verify_key),
    }
    admission = parse_admission(table)
    assert admission == Admission(clients=(pk(ALICE),), issuer=ISSUER.verify_key)
    assert admission.table() == table
    assert parse_admission({"issuer": table["issuer"]}).table() == {"issuer": table["issuer"]}


@pytest.mark.parametrize(
    ("table", "field", "fragment"),
    [
        ({}, "", "admits nobody"),
        ({"clients": []}, "", "admits nobody"),
        ({"clients": "abc"}, "clients", "expected an array"),
        ({"clients": [public_key_text(ALICE.verify_key), 3]}, "clients[1]", "expected a string"),
        ({"clients": ["AAAA"]}, "clients[0]", "not an Ed25519 public key"),
        ({"issuer": 5}, "issuer", "expected a string"),
        ({"issuer": "!!"}, "issuer", "not an Ed25519 public key"),
        ({"issuers": "x"}, "issuers", "unknown key"),
    ],
)
def test_parse_admission_errors_name_the_field(
    table: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(AdmissionError, match=fragment) as info:
        parse_admission(table)
    assert info.value.field == field


def test_chain_file_admission_table(tmp_path: Path) -> None:
    data = valid_data()
    assert parse_chain_config(data, source="c.toml").admission is None
    data["admission"] = {
        "clients": [public_key_text(ALICE.verify_key), public_key_text(BOB.verify_key)],
        "issuer": public_key_text(ISSUER.verify_key),
    }
    config = parse_chain_config(data, source="c.toml")
    assert config.admission == Admission(clients=(pk(ALICE), pk(BOB)), issuer=ISSUER.verify_key)
    assert "admission" not in config.sections
    text = render_chain_config(config)
    assert tomllib.loads(text)["admission"] == data["admission"]
    assert load_chain_config(write(tmp_path, text)) == config
    settings = node_settings(config, "mix0", messages=2, payload_length=8)
    assert settings.admission == config.admission
    assert "admission" not in render_chain_config(parse_chain_config(valid_data(), source="c"))


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"clients": ["AAAA"]}, "admission.clients[0]"),
        ({"issuer": 1}, "admission.issuer"),
        ({"extra": 1}, "admission.extra"),
        ({}, "admission"),
        ("x", "admission"),
    ],
)
def test_chain_file_admission_errors(table: object, field: str) -> None:
    data = valid_data()
    data["admission"] = table
    with pytest.raises(ChainConfigError) as info:
        parse_chain_config(data, source="c.toml")
    assert info.value.field == field
    assert str(info.value).startswith(f"c.toml: {field}: ")


# =========================================================================== frames


LIMITS = FrameLimits(chain_id=CHAIN, submission_length=ENTRY_BOX)


def wire_round_trip(frame: Submit) -> Submit:
    raw = decode_frame(encode_frame(to_wire(frame)), max_size=1 << 20)
    parsed = parse_request("submit", raw, LIMITS)
    assert isinstance(parsed, Submit)
    return parsed


def test_submit_frames_carry_the_admission_fields_only_when_present() -> None:
    plain = Submit(1, "alice", box())
    assert set(to_wire(plain)) == {"type", "round", "client", "box"}
    assert wire_round_trip(plain) == plain
    signed = signed_submit(ALICE)
    assert set(to_wire(signed)) == {"type", "round", "client", "box", "credential", "signature"}
    assert wire_round_trip(signed) == signed
    token = issue_token(ISSUER, chain_id=CHAIN, credential=pk(ALICE))
    with_token = signed_submit(ALICE, token=token)
    assert wire_round_trip(with_token) == with_token


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"credential": b"k" * 31}, BadLength),
        ({"signature": b"s" * 65}, BadLength),
        ({"token": b"t" * 71}, BadLength),
        ({"credential": "text"}, MalformedFrame),
        ({"signature": None}, MalformedFrame),
        ({"box": b"o" * (ENTRY_BOX - 1)}, BadLength),  # the box before admission fields
    ],
)
def test_submit_admission_fields_are_checked_by_the_parser(
    change: dict[str, object], error: type[Exception]
) -> None:
    raw = {**to_wire(signed_submit(ALICE)), **change}
    with pytest.raises(error):
        parse_request("submit", raw, LIMITS)


def test_submit_admission_fields_come_together() -> None:
    raw = to_wire(signed_submit(ALICE))
    for drop in ("credential", "signature"):
        with pytest.raises(MalformedFrame, match="together"):
            parse_request("submit", {k: v for k, v in raw.items() if k != drop}, LIMITS)
    token_only = {
        k: v for k, v in raw.items() if k not in ("credential", "signature")
    } | {"token": b"t" * TOKEN_LENGTH}
    with pytest.raises(MalformedFrame, match="token"):
        parse_request("submit", token_only, LIMITS)


# =========================================================================== the entry machine


def make_machine(records: NodeRecords | None = None, now: float = NOW) -> EntryMachine:
    kwargs: dict[str, Any] = {
        "name": "mix1",
        "hops": HOPS,
        "messages": M,
        "box_length": ENTRY_BOX,
        "policy": POLICY,
        "keys": Keys("mix1", 1),
        "credentials": True,
    }
    if records is None:
        return EntryMachine(**kwargs)
    machine, actions = EntryMachine.restore(records, now, **kwargs)
    assert actions == []
    return machine


def carry_out(m: EntryMachine, store: NodeStore, actions: list[Action]) -> list[Action]:
    """Play the adapter: commit each write to the real store in order, tell the machine,
    peel with the fake peel; return the replies and sends."""
    out: list[Action] = []
    queue = list(actions)
    while queue:
        action = queue.pop(0)
        if isinstance(action, Persist):
            assert store.apply([action.writes]) == [None]
            if action.token is not None:
                queue[0:0] = m.persisted(action.token, NOW)
        elif isinstance(action, Peel):
            queue[0:0] = m.peeled(action.token, peel(action.items, action.split), NOW)
        else:
            out.append(action)
    return out


def open_round(m: EntryMachine, store: NodeStore) -> None:
    carry_out(m, store, m.handle_timer(NOW))
    assert carry_out(m, store, m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW)) == []
    assert m.status(1) is RoundStatus.OPEN


def test_the_machine_requires_the_credential_as_client_id() -> None:
    m = make_machine()
    m.handle_timer(NOW)
    m.on_reply(OpenRound(1), RoundKeys(1, downstream(1)), NOW)
    m.persisted(Opened(1), NOW)
    plain = Submit(1, "alice", box())
    with pytest.raises(Unauthorized):
        m.on_submit(plain)
    signed = signed_submit(ALICE)
    with pytest.raises(MalformedFrame):
        m.on_submit(Submit(1, "alice", signed.box, credential=signed.credential,
                           signature=signed.signature))  # fmt: skip
    one(m.on_submit(signed), Peel)


def test_one_submission_per_credential_per_round_also_after_a_restart(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "mix1.db")
    try:
        m = make_machine()
        open_round(m, store)
        alice = signed_submit(ALICE)
        assert carry_out(m, store, m.on_submit(alice)) == [
            Reply(Accepted(1, credential_client_id(pk(ALICE))))
        ]
        # an exact retry gets its receipt; another submission under the credential does not
        assert m.on_submit(alice) == [Reply(Accepted(1, alice.client))]
        with pytest.raises(DuplicateClient):
            m.on_submit(signed_submit(ALICE))
        # the entry mix restarts from what it stored
        restored = make_machine(store.records(), now=NOW + 1)
        assert restored.status(1) is RoundStatus.OPEN
        assert restored.on_submit(alice) == [Reply(Accepted(1, alice.client))]
        with pytest.raises(DuplicateClient):
            restored.on_submit(signed_submit(ALICE))
        bob = signed_submit(BOB)
        assert carry_out(restored, store, restored.on_submit(bob)) == [
            Reply(Accepted(1, bob.client))
        ]
        stored = store.records()
        assert [s.client for s in stored.submissions[1]] == [alice.client, bob.client]
    finally:
        store.close()
