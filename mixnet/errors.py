"""Typed errors of the mixnet, each with a stable wire code.

Every error is a :class:`MixnetError` carrying a stable kebab-case ``code`` (what travels in
an error frame and what programs match on) and a short human ``reason`` (the exception
message). Reasons are for people: they are cleaned to one printable line of at most
:data:`MAX_REASON_LENGTH` characters and must never contain secret material (keys, seeds,
plaintexts).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: Longest reason kept, in characters; longer reasons are cut and end with "...".
MAX_REASON_LENGTH = 200


def clean_reason(reason: str) -> str:
    """Return ``reason`` as one printable line of at most :data:`MAX_REASON_LENGTH` chars.

    Control characters (newlines included) become spaces, so a reason received from a peer
    cannot forge log lines. Raises ``TypeError`` if ``reason`` is not a ``str``.
    """
    if not isinstance(reason, str):
        raise TypeError(f"reason must be str, not {type(reason).__name__}")
    line = "".join(ch if ch.isprintable() else " " for ch in reason).strip()
    if len(line) > MAX_REASON_LENGTH:
        line = line[: MAX_REASON_LENGTH - 3] + "..."
    return line


class MixnetError(Exception):
    """Base of all mixnet errors: a stable wire ``code`` plus a short human ``reason``.

    Subclasses fix ``code`` as a class attribute. The base class may be given an explicit
    ``code`` (used for codes received from a peer that this version does not know).
    """

    code: str = "mixnet-error"

    def __init__(self, reason: str, *, code: str | None = None) -> None:
        cleaned = clean_reason(reason)
        super().__init__(cleaned)
        if code is not None:
            if not isinstance(code, str) or not code:
                raise TypeError("code must be a non-empty str")
            self.code = code

    @property
    def reason(self) -> str:
        """The cleaned human-readable reason (same as ``str(self)``)."""
        return str(self.args[0])

    def as_pair(self) -> tuple[str, str]:
        """Return ``(code, reason)``, the two fields of an error frame."""
        return (self.code, self.reason)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        """Pickle/copy as ``error_from_code(code, reason)``, keeping a non-default code."""
        return (error_from_code, (self.code, self.reason))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, reason={self.reason!r})"


class MalformedFrame(MixnetError):
    """A frame or field is not what the protocol allows (bad msgpack, wrong type, ...)."""

    code = "malformed-frame"


class UnsupportedVersion(MixnetError):
    """The frame's protocol version ``"v"`` is not the one this node speaks."""

    code = "unsupported-version"


class UnexpectedFrameType(MixnetError):
    """A well-formed frame of a type that is not acceptable at this point."""

    code = "unexpected-type"


class FrameTooLarge(MixnetError):
    """A frame exceeds the configured maximum size in bytes."""

    code = "frame-too-large"


class BadLength(MixnetError):
    """A ciphertext, key or field has the wrong length in bytes."""

    code = "bad-length"


class DecryptionFailed(MixnetError):
    """An onion layer did not authenticate with this round key and binding (wrong key;
    made for another chain, round or hop; tampered or forged)."""

    code = "decryption-failed"


class BadSignature(MixnetError):
    """A signature does not verify under the expected identity key."""

    code = "bad-signature"


class UnknownRound(MixnetError):
    """The round id is not known here (never opened, or its key is erased)."""

    code = "unknown-round"


class RoundClosed(MixnetError):
    """The round is closed: it accepts no more input and its id is never reused."""

    code = "round-closed"


class DuplicateClient(MixnetError):
    """A client submitted twice in the same round."""

    code = "duplicate-client"


class WrongCount(MixnetError):
    """A batch or list holds a different number of items than required."""

    code = "wrong-count"


class Unauthorized(MixnetError):
    """A frame only the node's predecessor may send came from an unauthenticated peer."""

    code = "unauthorized"


class NotReady(MixnetError):
    """The round is not at the step the request needs yet (e.g. ``trace`` before the last
    mix has its whole batch); the sender asks again later."""

    code = "not-ready"


class InternalError(MixnetError):
    """A node-side failure that is not the peer's fault (details are logged locally only)."""

    code = "internal-error"


class KeyFileError(MixnetError, ValueError):
    """A key file or public key text is missing, unsafe or unparsable.

    Also a ``ValueError``, so callers parsing configuration may catch either.
    """

    code = "bad-key-file"


_ALL_ERRORS: tuple[type[MixnetError], ...] = (
    MalformedFrame,
    UnsupportedVersion,
    UnexpectedFrameType,
    FrameTooLarge,
    BadLength,
    DecryptionFailed,
    BadSignature,
    UnknownRound,
    RoundClosed,
    DuplicateClient,
    WrongCount,
    Unauthorized,
    NotReady,
    InternalError,
    KeyFileError,
)

#: Wire code -> error class, for every error defined here.
ERRORS_BY_CODE: Mapping[str, type[MixnetError]] = MappingProxyType(
    {cls.code: cls for cls in _ALL_ERRORS}
)
assert len(ERRORS_BY_CODE) == len(_ALL_ERRORS), "error codes must be unique"


def error_from_code(code: str, reason: str) -> MixnetError:
    """Build the error for a wire ``code``: its subclass, or a base error keeping ``code``.

    Never raises for unknown codes (they give a plain :class:`MixnetError` with that code);
    raises ``TypeError`` if ``code`` or ``reason`` is not a ``str`` or ``code`` is empty.
    """
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        return MixnetError(reason, code=code)
    return cls(reason)


class LinkClosed(MixnetError):
    """A request on a :class:`mixnet.link.Link` after (or while) it was closed.

    A local condition, never sent in an error frame (so it is not in :data:`ERRORS_BY_CODE`).
    """

    code = "link-closed"
