"""Admission: which clients may submit to a chain (the chain file's ``[admission]`` table).

Off unless the chain file has an ``[admission]`` table::

    [admission]
    clients = ["<base64 Ed25519 public key>", ...]   # admitted client keys, and/or
    issuer = "<base64 Ed25519 public key>"           # whose signed tokens admit clients

With admission on, every ``submit`` frame carries a *credential* (the client's 32-byte
Ed25519 public key), the client's *signature* over the submission and, for a client admitted
by the issuer rather than listed, the issuer's *token*. The entry mix checks lengths and
types first, then whether the credential is admitted (listed, or a valid unexpired token),
then the submission's signature — all before it peels anything — and refuses with
``unauthorized`` (not admitted) or ``bad-signature`` (the signature does not verify). The
credential is the submission's client id (:func:`credential_client_id`), so the entry mix's
rule "one submission per client id per round" (receipts, exact retries, restarts) becomes
"one submission per credential per round".

Encodings (``lp(x)`` is ``u32be(len(x)) || x``; every integer is big-endian):

* token message: ``lp("mixnet/admission-token/v1") || lp(utf8(chain id)) || lp(credential)
  || u64be(expires)``; a *token* is the issuer's 64-byte Ed25519 signature over it followed
  by ``u64be(expires)`` (72 bytes). ``expires`` is unix seconds; 0 means never. A token is
  valid while ``now < expires`` at the entry mix.
* submission message: ``lp("mixnet/submission/v1") || lp(utf8(chain id)) || u64be(round)
  || lp(digest)`` with ``digest = mixnet.core.intake.submission_digest(box)`` (32 bytes); the
  client signs it with its key (64 bytes).

Text forms: public keys as in the chain file (standard base64, 44 characters), tokens as the
standard base64 of their 72 bytes (:func:`token_text`, :func:`parse_token`).

This module imports nothing that imports :mod:`mixnet.frames` (which takes its lengths from
here); the round machine uses :func:`check_credential_client` for its part of the rule.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from mixnet.errors import (
    BadLength,
    BadSignature,
    KeyFileError,
    MalformedFrame,
    Unauthorized,
)
from mixnet.keys import IDENTITY_KEY_LENGTH, SIGNATURE_LENGTH, parse_public_key, public_key_text

if TYPE_CHECKING:
    from mixnet.frames import Submit

__all__ = [
    "ADMISSION_KEYS",
    "CREDENTIAL_LENGTH",
    "DIGEST_LENGTH",
    "EXPIRES_MAX",
    "SUBMISSION_DOMAIN",
    "TOKEN_DOMAIN",
    "TOKEN_LENGTH",
    "Admission",
    "AdmissionError",
    "check_credential_client",
    "credential_client_id",
    "issue_token",
    "parse_admission",
    "parse_token",
    "sign_submission",
    "submission_message",
    "token_expires",
    "token_message",
    "token_text",
    "verify_submission",
    "verify_token",
]

#: Bytes of a credential (a client's Ed25519 public key).
CREDENTIAL_LENGTH = IDENTITY_KEY_LENGTH
#: Bytes of a token: the issuer's Ed25519 signature, then ``u64be(expires)``.
TOKEN_LENGTH = SIGNATURE_LENGTH + 8
#: Bytes of the submission digest a client signs (:func:`mixnet.core.intake.submission_digest`).
DIGEST_LENGTH = 32
#: Largest expiry (unix seconds) a token can carry; 0 means the token never expires.
EXPIRES_MAX = (1 << 64) - 1
#: Domain of the message an issuer signs to admit a client.
TOKEN_DOMAIN = b"mixnet/admission-token/v1"
#: Domain of the message a client signs to submit.
SUBMISSION_DOMAIN = b"mixnet/submission/v1"
#: The keys of the ``[admission]`` table, in the order they are written.
ADMISSION_KEYS: tuple[str, ...] = ("clients", "issuer")

_ROUND_MAX = (1 << 64) - 1


class AdmissionError(ValueError):
    """An ``[admission]`` value is invalid; :attr:`field` names it relative to the table
    (``"clients[2]"``, ``"issuer"``, or ``""`` for the table itself) and :attr:`problem`
    says why, in one line."""

    def __init__(self, problem: str, *, field: str = "") -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.problem = problem
        self.field = field


# --------------------------------------------------------------------------- encodings


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _chain_bytes(chain_id: str) -> bytes:
    if not isinstance(chain_id, str) or not chain_id:
        raise ValueError("chain_id must be a non-empty str")
    return chain_id.encode("utf-8")


def _exact_bytes(value: object, length: int, what: str) -> bytes:
    """``value`` if it is ``bytes`` of ``length``: :class:`MalformedFrame` if not bytes,
    :class:`BadLength` if another length."""
    if not isinstance(value, bytes):
        raise MalformedFrame(f"{what} must be bytes")
    if len(value) != length:
        raise BadLength(f"{what} must be {length} bytes, got {len(value)}")
    return value


def _expires(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= EXPIRES_MAX:
        raise ValueError(f"expires must be an int in 0..2**64-1 (0: never), got {value!r}")
    return value


def token_message(chain_id: str, credential: bytes, expires: int) -> bytes:
    """The bytes an issuer signs to admit ``credential`` on chain ``chain_id`` until
    ``expires`` (unix seconds, 0: never); see the module docstring.

    :raises ValueError: empty ``chain_id`` or ``expires`` outside 0..2**64-1.
    :raises MalformedFrame, BadLength: ``credential`` is not 32 bytes.
    """
    credential = _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
    return b"".join(
        (
            _lp(TOKEN_DOMAIN),
            _lp(_chain_bytes(chain_id)),
            _lp(credential),
            struct.pack(">Q", _expires(expires)),
        )
    )


def submission_message(chain_id: str, round_id: int, digest: bytes) -> bytes:
    """The bytes a client signs to submit onions with ``digest`` (their
    :func:`~mixnet.core.intake.submission_digest`) into round ``round_id`` of chain ``chain_id``.

    :raises ValueError: empty ``chain_id`` or ``round_id`` outside 0..2**64-1.
    :raises MalformedFrame, BadLength: ``digest`` is not 32 bytes.
    """
    digest = _exact_bytes(digest, DIGEST_LENGTH, "digest")
    if isinstance(round_id, bool) or not isinstance(round_id, int):
        raise ValueError("round_id must be an int")
    if not 0 <= round_id <= _ROUND_MAX:
        raise ValueError(f"round_id must be in 0..2**64-1, got {round_id}")
    return b"".join(
        (
            _lp(SUBMISSION_DOMAIN),
            _lp(_chain_bytes(chain_id)),
            struct.pack(">Q", round_id),
            _lp(digest),
        )
    )


def credential_client_id(credential: bytes) -> str:
    """The client id of a credentialed submission: the credential's standard base64 text
    (44 characters, as public keys are written in the chain file).

    :raises MalformedFrame, BadLength: ``credential`` is not 32 bytes.
    """
    credential = _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
    return base64.b64encode(credential).decode("ascii")


def check_credential_client(client: str, credential: bytes | None) -> None:
    """The round machine's rule on a chain with admission: a submission names its
    credential, and its client id is :func:`credential_client_id` of it — so that one
    submission per client id per round is one per credential per round.

    :raises Unauthorized: no credential.
    :raises MalformedFrame, BadLength: the credential is not 32 bytes, or ``client`` is
        not its client id.
    """
    if credential is None:
        raise Unauthorized("this chain admits only clients with a credential")
    if client != credential_client_id(credential):
        raise MalformedFrame(
            "the client id of a submission with a credential must be the credential's text"
        )


# --------------------------------------------------------------------------- tokens


def _credential_of(credential: bytes | VerifyKey) -> bytes:
    if isinstance(credential, VerifyKey):
        return bytes(credential)
    return _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")


def issue_token(
    issuer: SigningKey,
    *,
    chain_id: str,
    credential: bytes | VerifyKey,
    expires: int | None = None,
) -> bytes:
    """A 72-byte token by which ``issuer`` admits ``credential`` (a client's public key) to
    chain ``chain_id`` until ``expires`` (unix seconds; ``None`` or 0: never).

    :raises TypeError: ``issuer`` is not a :class:`~nacl.signing.SigningKey`.
    :raises ValueError: empty ``chain_id`` or ``expires`` outside 0..2**64-1.
    :raises MalformedFrame, BadLength: ``credential`` is not 32 bytes.
    """
    if not isinstance(issuer, SigningKey):
        raise TypeError(f"issuer must be a SigningKey, not {type(issuer).__name__}")
    when = 0 if expires is None else _expires(expires)
    message = token_message(chain_id, _credential_of(credential), when)
    return bytes(issuer.sign(message).signature) + struct.pack(">Q", when)


def token_expires(token: bytes) -> int | None:
    """The expiry (unix seconds) a token carries, ``None`` if it never expires.

    :raises MalformedFrame, BadLength: ``token`` is not 72 bytes.
    """
    token = _exact_bytes(token, TOKEN_LENGTH, "token")
    (when,) = struct.unpack(">Q", token[SIGNATURE_LENGTH:])
    return None if when == 0 else int(when)


def verify_token(
    issuer: VerifyKey, token: bytes, *, chain_id: str, credential: bytes, now: float
) -> None:
    """Check that ``token`` admits ``credential`` to ``chain_id`` at time ``now``: not
    expired (checked first), then the issuer's signature.

    :raises MalformedFrame, BadLength: ``token`` is not 72 bytes or ``credential`` not 32.
    :raises Unauthorized: the token has expired, or was not issued by ``issuer`` for this
        credential and chain (forged, or another client's or chain's token).
    """
    token = _exact_bytes(token, TOKEN_LENGTH, "token")
    credential = _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
    expires = token_expires(token)
    if expires is not None and now >= expires:
        raise Unauthorized("the admission token has expired")
    message = token_message(chain_id, credential, expires or 0)
    try:
        issuer.verify(message, token[:SIGNATURE_LENGTH])
    except BadSignatureError:
        raise Unauthorized(
            "the admission token was not issued for this client key on this chain"
        ) from None


def token_text(token: bytes) -> str:
    """The standard base64 text of a token (96 characters).

    :raises MalformedFrame, BadLength: ``token`` is not 72 bytes.
    """
    return base64.b64encode(_exact_bytes(token, TOKEN_LENGTH, "token")).decode("ascii")


def parse_token(text: str) -> bytes:
    """The token written as ``text`` (:func:`token_text`; surrounding whitespace ignored).

    :raises KeyFileError: ``text`` is not a str, not strict base64, or not 72 bytes once
        decoded (the message never echoes ``text``).
    """
    if not isinstance(text, str):
        raise KeyFileError(f"a token must be base64 text, not {type(text).__name__}")
    try:
        raw = base64.b64decode(text.strip().encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise KeyFileError("the token is not valid base64") from None
    if len(raw) != TOKEN_LENGTH:
        raise KeyFileError(f"a token must decode to {TOKEN_LENGTH} bytes, got {len(raw)}")
    return raw


# --------------------------------------------------------------------------- submissions


def sign_submission(key: SigningKey, *, chain_id: str, round_id: int, digest: bytes) -> bytes:
    """The client's 64-byte signature of a submission (see :func:`submission_message`).

    :raises TypeError: ``key`` is not a :class:`~nacl.signing.SigningKey`.
    :raises ValueError, MalformedFrame, BadLength: as :func:`submission_message`.
    """
    if not isinstance(key, SigningKey):
        raise TypeError(f"key must be a SigningKey, not {type(key).__name__}")
    return bytes(key.sign(submission_message(chain_id, round_id, digest)).signature)


def verify_submission(
    credential: bytes, signature: bytes, *, chain_id: str, round_id: int, digest: bytes
) -> None:
    """Check a submission's signature under its ``credential``.

    :raises MalformedFrame, BadLength: a field has the wrong type or length (checked
        before any cryptography).
    :raises BadSignature: the signature does not verify (forged, or made for another
        chain, round or submission).
    """
    credential = _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
    signature = _exact_bytes(signature, SIGNATURE_LENGTH, "signature")
    message = submission_message(chain_id, round_id, digest)
    try:
        VerifyKey(credential).verify(message, signature)
    except BadSignatureError:
        raise BadSignature("the submission's signature does not verify") from None


# --------------------------------------------------------------------------- the table


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "table"
    return type(value).__name__


@dataclass(frozen=True)
class Admission:
    """The ``[admission]`` table: ``clients``, the admitted client keys (32 bytes each, in
    the order written; a :class:`~nacl.signing.VerifyKey` is accepted too), and ``issuer``,
    the key whose tokens admit further clients (``None``: none). At least one of the two
    must admit someone.

    :raises AdmissionError: a client key is not 32 bytes or repeats, ``issuer`` is not a
        ``VerifyKey``, or the table admits nobody.
    """

    clients: tuple[bytes, ...] = ()
    issuer: VerifyKey | None = None
    _lookup: frozenset[bytes] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.clients, (str, bytes)) or not isinstance(self.clients, Sequence):
            raise AdmissionError("expected a sequence of client keys", field="clients")
        keys: list[bytes] = []
        for index, key in enumerate(self.clients):
            raw = bytes(key) if isinstance(key, VerifyKey) else key
            if not isinstance(raw, bytes) or len(raw) != CREDENTIAL_LENGTH:
                raise AdmissionError(
                    f"expected a {CREDENTIAL_LENGTH}-byte Ed25519 public key",
                    field=f"clients[{index}]",
                )
            if raw in keys:
                raise AdmissionError(
                    f"repeats clients[{keys.index(raw)}]", field=f"clients[{index}]"
                )
            keys.append(raw)
        object.__setattr__(self, "clients", tuple(keys))
        object.__setattr__(self, "_lookup", frozenset(keys))
        if self.issuer is not None and not isinstance(self.issuer, VerifyKey):
            raise AdmissionError(
                f"expected a VerifyKey or None, got {type(self.issuer).__name__}", field="issuer"
            )
        if not keys and self.issuer is None:
            raise AdmissionError("admits nobody: list client keys in clients, or name an issuer")

    def admits(
        self, credential: bytes, token: bytes | None, *, chain_id: str, now: float
    ) -> None:
        """Check that ``credential`` may submit at time ``now``: it is listed, or ``token``
        is the issuer's valid, unexpired token for it on ``chain_id``.

        :raises MalformedFrame, BadLength: ``credential`` or ``token`` has the wrong type or
            length.
        :raises Unauthorized: the credential is not admitted.
        """
        credential = _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
        if token is not None:
            token = _exact_bytes(token, TOKEN_LENGTH, "token")
        if credential in self._lookup:
            return
        if self.issuer is None:
            raise Unauthorized("this client key is not admitted to the chain")
        if token is None:
            raise Unauthorized("this client key is not listed and carries no admission token")
        verify_token(self.issuer, token, chain_id=chain_id, credential=credential, now=now)

    def check(self, frame: Submit, *, chain_id: str, digest: bytes, now: float) -> None:
        """Everything the entry mix checks of a ``submit`` frame before it peels: the
        credential, signature and token fields (types and lengths), that the client id is
        the credential's (:func:`check_credential_client`), that the credential is admitted
        (:meth:`admits`), then the submission's signature over (``chain_id``, the frame's
        round, ``digest`` — the :func:`~mixnet.core.intake.submission_digest` of its box).

        :raises Unauthorized: no credential, or a credential that is not admitted.
        :raises MalformedFrame, BadLength: a field is missing, of the wrong type or length,
            or the client id is not the credential's.
        :raises BadSignature: the submission's signature does not verify.
        """
        credential = frame.credential
        if credential is None:
            raise Unauthorized(
                "this chain admits only clients with a credential: sign the submission "
                "with an admitted client key"
            )
        _exact_bytes(credential, CREDENTIAL_LENGTH, "credential")
        if frame.signature is None:
            raise MalformedFrame("a submission with a credential must carry its signature")
        _exact_bytes(frame.signature, SIGNATURE_LENGTH, "signature")
        if frame.token is not None:
            _exact_bytes(frame.token, TOKEN_LENGTH, "token")
        check_credential_client(frame.client, credential)
        self.admits(credential, frame.token, chain_id=chain_id, now=now)
        verify_submission(
            credential,
            frame.signature,
            chain_id=chain_id,
            round_id=frame.round_id,
            digest=digest,
        )

    def table(self) -> dict[str, object]:
        """The ``[admission]`` table that parses back to this admission."""
        table: dict[str, object] = {}
        if self.clients:
            table["clients"] = [public_key_text(VerifyKey(key)) for key in self.clients]
        if self.issuer is not None:
            table["issuer"] = public_key_text(self.issuer)
        return table


def parse_admission(value: object) -> Admission:
    """Parse an ``[admission]`` table as :mod:`tomllib` returns it: ``clients``, an array
    of base64 Ed25519 public keys, and/or ``issuer``, one such key.

    :raises AdmissionError: not a table, an unknown key, a value of the wrong type, a key
        that is not an Ed25519 public key, a repeated client key, or a table that admits
        nobody (:attr:`AdmissionError.field` names the value).
    """
    if not isinstance(value, Mapping):
        raise AdmissionError(f"expected a table, got {_type_name(value)}")
    for key in value:
        if key not in ADMISSION_KEYS:
            raise AdmissionError(
                f"unknown key (allowed: {', '.join(ADMISSION_KEYS)})", field=str(key)
            )
    raw_clients = value.get("clients", [])
    if not isinstance(raw_clients, list):
        raise AdmissionError(
            f"expected an array of strings, got {_type_name(raw_clients)}", field="clients"
        )
    clients = [
        _public_key(text, f"clients[{index}]") for index, text in enumerate(raw_clients)
    ]
    issuer = None if "issuer" not in value else _public_key(value["issuer"], "issuer")
    return Admission(clients=tuple(bytes(key) for key in clients), issuer=issuer)


def _public_key(text: object, path: str) -> VerifyKey:
    if not isinstance(text, str):
        raise AdmissionError(f"expected a string, got {_type_name(text)}", field=path)
    try:
        return parse_public_key(text)
    except KeyFileError as exc:
        raise AdmissionError(f"not an Ed25519 public key ({exc.reason})", field=path) from None
