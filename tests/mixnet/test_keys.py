"""Tests for mixnet.keys: identity key files, round keys and signed announcements."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from mixnet.errors import BadLength, BadSignature, KeyFileError, MalformedFrame, UnknownRound
from mixnet.keys import (
    RoundKeyAnnouncement,
    RoundKeyring,
    announce_round_key,
    generate_identity,
    parse_public_key,
    public_key_text,
    read_key_file,
    write_key_file,
)


def changes(field: str, value: object) -> dict[str, Any]:
    return {field: value}


def announcement(identity: SigningKey) -> RoundKeyAnnouncement:
    return announce_round_key(
        identity,
        chain_id="chain-1",
        node="mix-a",
        round_id=42,
        public_key=bytes(PrivateKey.generate().public_key),
    )


# ------------------------------------------------------------------ announcements


def test_announcement_signs_and_verifies() -> None:
    identity = generate_identity()
    ann = announcement(identity)
    assert len(ann.signature) == 64
    ann.verify(identity.verify_key)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chain_id", "chain-2"),
        ("node", "mix-b"),
        ("round_id", 43),
        ("public_key", bytes(32)),
        ("signature", bytes(64)),
    ],
)
def test_tampered_announcement_fails(field: str, value: object) -> None:
    identity = generate_identity()
    tampered = dataclasses.replace(announcement(identity), **changes(field, value))
    with pytest.raises(BadSignature) as info:
        tampered.verify(identity.verify_key)
    assert info.value.code == "bad-signature"


def test_announcement_from_other_identity_fails() -> None:
    ann = announcement(generate_identity())
    with pytest.raises(BadSignature):
        ann.verify(generate_identity().verify_key)


def test_signed_bytes_are_unambiguous() -> None:
    identity = generate_identity()
    key = bytes(32)
    one = announce_round_key(identity, chain_id="ab", node="c", round_id=1, public_key=key)
    two = announce_round_key(identity, chain_id="a", node="bc", round_id=1, public_key=key)
    assert one.signed_bytes() != two.signed_bytes()


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("public_key", bytes(31), BadLength),
        ("signature", bytes(65), BadLength),
        ("public_key", "x" * 32, MalformedFrame),
        ("round_id", True, MalformedFrame),
        ("round_id", -1, MalformedFrame),
        ("round_id", 1 << 64, MalformedFrame),
        ("chain_id", "", MalformedFrame),
        ("node", b"mix", MalformedFrame),
    ],
)
def test_announcement_fields_are_checked(field: str, value: object, error: type[Exception]) -> None:
    ann = announcement(generate_identity())
    with pytest.raises(error):
        dataclasses.replace(ann, **changes(field, value))


def test_announce_checks_before_signing() -> None:
    with pytest.raises(BadLength):
        announce_round_key(
            generate_identity(), chain_id="c", node="n", round_id=1, public_key=bytes(33)
        )
    with pytest.raises(TypeError):
        not_a_key: Any = b"seed"
        announce_round_key(not_a_key, chain_id="c", node="n", round_id=1, public_key=bytes(32))


# ------------------------------------------------------------------ key files


def test_key_file_round_trip(tmp_path: Path) -> None:
    identity = generate_identity()
    path = tmp_path / "mix-a.key"
    write_key_file(path, identity, name="mix-a")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith("# mixnet identity key for mix-a\n")
    assert public_key_text(identity.verify_key) in text
    assert read_key_file(path) == identity
    assert read_key_file(str(path)) == identity


def test_key_file_mode_ignores_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_key_file(tmp_path / "k", generate_identity(), name="n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600


def test_key_file_refuses_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "k"
    first = generate_identity()
    write_key_file(path, first, name="n")
    with pytest.raises(KeyFileError, match="already exists"):
        write_key_file(path, generate_identity(), name="n")
    assert read_key_file(path) == first
    second = generate_identity()
    write_key_file(path, second, name="n", overwrite=True)
    assert read_key_file(path) == second
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_key_file_refuses_group_or_world_access(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "k"
    write_key_file(path, generate_identity(), name="n")
    path.chmod(mode)
    with pytest.raises(KeyFileError, match="chmod 600") as info:
        read_key_file(path)
    assert info.value.code == "bad-key-file"


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="does not exist"):
        read_key_file(tmp_path / "absent")


def test_directory_is_not_a_key_file(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_key_file(directory)


@pytest.mark.parametrize(
    "contents",
    [
        b"",
        b"\xff\xfe garbage",
        b"not toml at all",
        b'secret = "not base64!"\n',
        b'secret = "AAAA"\n',
        b"secret = 12\n",
        b'secret = "' + b"A" * 43 + b'="\nextra = 1\n',
        b"x" * 5000,
    ],
)
def test_garbage_key_file(tmp_path: Path, contents: bytes) -> None:
    path = tmp_path / "k"
    path.write_bytes(contents)
    path.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        read_key_file(path)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_key_file_error_never_echoes_secret(tmp_path: Path) -> None:
    path = tmp_path / "k"
    secret = "c2VjcmV0LXNlZWQtdGhhdC1pcy10b28tc2hvcnQ="
    path.write_text(f'secret = "{secret}"\n')
    path.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        read_key_file(path)
    assert secret not in str(info.value)


@pytest.mark.parametrize("name", ["", "two\nlines"])
def test_key_file_name_must_be_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        write_key_file(tmp_path / "k", generate_identity(), name=name)
    assert not (tmp_path / "k").exists()


def test_public_key_text_round_trip() -> None:
    verify_key = generate_identity().verify_key
    text = public_key_text(verify_key)
    assert len(text) == 44
    assert parse_public_key(f"  {text}\n") == verify_key


@pytest.mark.parametrize("text", ["", "!!!", "AAAA", "A" * 44, 12])
def test_parse_public_key_rejects_garbage(text: object) -> None:
    with pytest.raises(KeyFileError):
        parse_public_key(text)  # type: ignore[arg-type]


# ------------------------------------------------------------------ round keyring


def test_keyring_lifecycle() -> None:
    ring = RoundKeyring()
    with pytest.raises(UnknownRound):
        ring.secret(1)
    key = ring.open_round(1)
    assert ring.is_open(1)
    assert ring.secret(1) is key
    assert ring.public_key(1) == bytes(key.public_key)
    other = ring.open_round(2)
    assert bytes(other) != bytes(key)
    ring.erase(1)
    assert ring.erased(1)
    assert not ring.is_open(1)
    with pytest.raises(UnknownRound, match="erased") as info:
        ring.secret(1)
    assert info.value.code == "unknown-round"
    assert ring.secret(2) is other
    ring.erase(1)  # idempotent


def test_keyring_never_reuses_round_ids() -> None:
    ring = RoundKeyring()
    ring.open_round(5)
    with pytest.raises(ValueError, match="already open"):
        ring.open_round(5)
    ring.erase(5)
    with pytest.raises(ValueError, match="never reused"):
        ring.open_round(5)
    ring.erase(6)  # erasing an id never opened bars it too
    with pytest.raises(ValueError):
        ring.open_round(6)


@pytest.mark.parametrize("round_id", [-1, 1 << 64, True, "1"])
def test_keyring_validates_round_ids(round_id: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        RoundKeyring().open_round(round_id)  # type: ignore[arg-type]


def test_link_challenge_signature_round_trip() -> None:
    from mixnet.errors import BadLength, BadSignature
    from mixnet.keys import CHALLENGE_LENGTH, sign_link_challenge, verify_link_signature

    key = generate_identity()
    nonce = bytes(range(CHALLENGE_LENGTH))
    sig = sign_link_challenge(key, chain_id="c", node="mix1", challenge=nonce)
    verify_link_signature(key.verify_key, sig, chain_id="c", node="mix1", challenge=nonce)
    for kwargs in (
        {"chain_id": "other", "node": "mix1", "challenge": nonce},
        {"chain_id": "c", "node": "mix2", "challenge": nonce},
        {"chain_id": "c", "node": "mix1", "challenge": bytes(CHALLENGE_LENGTH)},
    ):
        with pytest.raises(BadSignature):
            verify_link_signature(key.verify_key, sig, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(BadLength):
        verify_link_signature(key.verify_key, sig[:-1], chain_id="c", node="mix1",
                              challenge=nonce)
    with pytest.raises(ValueError):
        sign_link_challenge(key, chain_id="c", node="mix1", challenge=b"short")
