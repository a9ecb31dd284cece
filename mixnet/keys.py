"""Identity keys, key files, per-round keys and signed round-key announcements.

* A mix node's long-term identity is an Ed25519 :class:`~nacl.signing.SigningKey`. Its seed
  lives in a per-node key file (:func:`write_key_file` / :func:`read_key_file`); its public
  half goes into the chain file as base64 text (:func:`public_key_text` /
  :func:`parse_public_key`).
* For every round a node makes a fresh X25519 key pair (:class:`RoundKeyring`) and signs the
  public half (:func:`announce_round_key`); clients check the announcement against the
  node's identity key (:meth:`RoundKeyAnnouncement.verify`) before they encrypt to it.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import secrets
import stat
import struct
import tomllib
from dataclasses import dataclass
from pathlib import Path

from nacl.exceptions import BadSignatureError
from nacl.public import PrivateKey
from nacl.signing import SigningKey, VerifyKey

from mixnet.errors import BadLength, BadSignature, KeyFileError, MalformedFrame, UnknownRound

#: Bytes of an Ed25519 seed, of an Ed25519 public key, and of an X25519 public key.
SEED_LENGTH = 32
IDENTITY_KEY_LENGTH = 32
ROUND_KEY_LENGTH = 32
#: Bytes of an Ed25519 signature.
SIGNATURE_LENGTH = 64
#: Largest key file read, in bytes (a real one is about 150 bytes).
MAX_KEY_FILE_SIZE = 4096

_ANNOUNCEMENT_DOMAIN = b"mixnet/round-key-announcement/v1"
_MAX_ROUND_ID = (1 << 64) - 1
_UNSAFE_MODE_BITS = stat.S_IRWXG | stat.S_IRWXO


# --------------------------------------------------------------------------- identity keys


def generate_identity() -> SigningKey:
    """Return a fresh Ed25519 identity key from the OS CSPRNG (via libsodium)."""
    return SigningKey.generate()


def public_key_text(verify_key: VerifyKey) -> str:
    """Return the standard base64 text (44 characters) of a 32-byte Ed25519 public key."""
    if not isinstance(verify_key, VerifyKey):
        raise TypeError(f"verify_key must be a VerifyKey, not {type(verify_key).__name__}")
    return base64.b64encode(bytes(verify_key)).decode("ascii")


def _decode_base64(text: str, what: str, length: int) -> bytes:
    """Strictly decode standard base64 ``text`` to exactly ``length`` bytes.

    Raises :class:`KeyFileError` naming ``what`` (never echoing ``text``) on any problem.
    """
    try:
        raw = base64.b64decode(text.strip().encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise KeyFileError(f"{what} is not valid base64") from None
    if len(raw) != length:
        raise KeyFileError(f"{what} must decode to {length} bytes, got {len(raw)}")
    return raw


def parse_public_key(text: str) -> VerifyKey:
    """Parse base64 ``text`` (as written by :func:`public_key_text`) into a ``VerifyKey``.

    Surrounding whitespace is ignored. Raises :class:`KeyFileError` (also a ``ValueError``)
    if ``text`` is not a str, not strict base64, or not 32 bytes once decoded.
    """
    if not isinstance(text, str):
        raise KeyFileError(f"public key must be base64 text, not {type(text).__name__}")
    return VerifyKey(_decode_base64(text, "public key", IDENTITY_KEY_LENGTH))


def _key_file_text(signing_key: SigningKey, name: str) -> str:
    """Return the TOML text of a key file for ``signing_key`` belonging to node ``name``."""
    seed = base64.b64encode(bytes(signing_key)).decode("ascii")
    public = public_key_text(signing_key.verify_key)
    return (
        f"# mixnet identity key for {name}\n"
        "# SECRET: keep this file private (mode 0600); never put it in the chain file.\n"
        f"# public key: {public}\n"
        f'secret = "{seed}"\n'
    )


def write_key_file(
    path: str | os.PathLike[str],
    signing_key: SigningKey,
    *,
    name: str,
    overwrite: bool = False,
) -> None:
    """Write ``signing_key`` to a new key file at ``path`` with mode 0600.

    The file is small TOML: comment lines naming the node and showing its public key, then
    ``secret = "<base64 32-byte seed>"``. Without ``overwrite`` an existing file is never
    touched; with it the old file is replaced atomically (write to a temporary file, then
    rename). Raises ``TypeError``/``ValueError`` for a bad ``signing_key`` or a ``name``
    that is empty or not one printable line, and :class:`KeyFileError` if the file exists
    (and not ``overwrite``) or cannot be written.
    """
    if not isinstance(signing_key, SigningKey):
        raise TypeError(f"signing_key must be a SigningKey, not {type(signing_key).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be str, not {type(name).__name__}")
    if not name or not name.isprintable():
        raise ValueError("name must be a non-empty single line of printable characters")
    target = Path(path)
    data = _key_file_text(signing_key, name).encode("utf-8")
    if overwrite:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
        _write_new_private_file(temporary, data)
        try:
            os.replace(temporary, target)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise KeyFileError(f"cannot write key file {target}: {exc.strerror}") from None
    else:
        _write_new_private_file(target, data)


def _write_new_private_file(path: Path, data: bytes) -> None:
    """Create ``path`` (which must not exist) with mode 0600, write ``data`` and fsync.

    On failure the partial file is removed and :class:`KeyFileError` is raised.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise KeyFileError(f"key file {path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # independent of the umask
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise KeyFileError(f"cannot write key file {path}: {exc.strerror}") from None
    os.close(fd)


def read_key_file(path: str | os.PathLike[str]) -> SigningKey:
    """Read an identity key written by :func:`write_key_file`.

    Raises :class:`KeyFileError` with a one-line reason (naming the path, never the key) if
    the file is missing or unreadable, is not a regular file, is accessible by group or
    others (any of mode bits 0o077; fix with ``chmod 600``), is larger than
    :data:`MAX_KEY_FILE_SIZE` bytes, is not UTF-8 TOML, or does not hold exactly one
    ``secret`` string that is the base64 of a 32-byte seed.
    """
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyFileError(f"key file {target} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"cannot open key file {target}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"key file {target} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & _UNSAFE_MODE_BITS:
            raise KeyFileError(
                f"key file {target} is accessible by group or others (mode {mode:04o}); "
                f"run: chmod 600 {target}"
            )
        raw = os.read(fd, MAX_KEY_FILE_SIZE + 1)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise KeyFileError(f"key file {target} is not a regular file") from None
        raise KeyFileError(f"cannot read key file {target}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_KEY_FILE_SIZE:
        raise KeyFileError(f"key file {target} is larger than {MAX_KEY_FILE_SIZE} bytes")
    return SigningKey(_parse_key_file(raw, target))


def _parse_key_file(raw: bytes, path: Path) -> bytes:
    """Return the 32-byte seed in key file contents ``raw``; :class:`KeyFileError` if bad."""
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        raise KeyFileError(f"key file {path} is not a valid key file (bad TOML)") from None
    if set(document) != {"secret"}:
        raise KeyFileError(f'key file {path} must hold exactly one key, "secret"')
    secret = document["secret"]
    if not isinstance(secret, str):
        raise KeyFileError(f'key file {path}: "secret" must be a base64 string')
    return _decode_base64(secret, f'key file {path}: "secret"', SEED_LENGTH)


# --------------------------------------------------------------------------- announcements


def _length_prefixed(data: bytes) -> bytes:
    """Return ``data`` preceded by its length as a big-endian uint32."""
    return struct.pack(">I", len(data)) + data


def _utf8_field(value: object, field: str) -> bytes:
    """UTF-8 encode a non-empty str field; :class:`MalformedFrame` naming ``field`` if not."""
    if not isinstance(value, str) or not value:
        raise MalformedFrame(f"announcement field {field!r} must be a non-empty str")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedFrame(f"announcement field {field!r} is not valid UTF-8") from None


@dataclass(frozen=True, slots=True)
class RoundKeyAnnouncement:
    """A node's signed statement "my X25519 public key for round ``round_id`` is ...".

    Fields: ``chain_id`` and ``node`` (non-empty str), ``round_id`` (int in ``[0, 2**64)``),
    ``public_key`` (32 bytes), ``signature`` (64-byte Ed25519 signature over
    :meth:`signed_bytes`). Construction validates types and lengths and raises
    :class:`MalformedFrame` (wrong type or range) or :class:`BadLength` (wrong length), so a
    value of this class is always well-formed; it is not necessarily authentic until
    :meth:`verify` passes.
    """

    chain_id: str
    node: str
    round_id: int
    public_key: bytes
    signature: bytes

    def __post_init__(self) -> None:
        self._check_fields()

    def _check_fields(self) -> None:
        """Raise :class:`MalformedFrame`/:class:`BadLength` unless every field is well-formed."""
        _utf8_field(self.chain_id, "chain_id")
        _utf8_field(self.node, "node")
        round_id = self.round_id
        if not isinstance(round_id, int) or isinstance(round_id, bool):
            raise MalformedFrame("announcement field 'round_id' must be an int")
        if not 0 <= round_id <= _MAX_ROUND_ID:
            raise MalformedFrame("announcement field 'round_id' must be in [0, 2**64)")
        for field, value, length in (
            ("public_key", self.public_key, ROUND_KEY_LENGTH),
            ("signature", self.signature, SIGNATURE_LENGTH),
        ):
            if not isinstance(value, bytes):
                raise MalformedFrame(f"announcement field {field!r} must be bytes")
            if len(value) != length:
                raise BadLength(
                    f"announcement field {field!r} must be {length} bytes, got {len(value)}"
                )

    def signed_bytes(self) -> bytes:
        """Return the canonical bytes the signature covers.

        Layout: length-prefixed domain string, length-prefixed UTF-8 ``chain_id``,
        length-prefixed UTF-8 ``node``, ``round_id`` as big-endian uint64, length-prefixed
        ``public_key``; every length prefix is a big-endian uint32.
        """
        return _announcement_message(self.chain_id, self.node, self.round_id, self.public_key)

    def verify(self, identity: VerifyKey) -> None:
        """Check the signature under the node's long-term ``identity`` key.

        Re-checks field types and lengths first (:class:`MalformedFrame`/:class:`BadLength`),
        then raises :class:`BadSignature` if the signature does not verify. Returns ``None``
        on success. Raises ``TypeError`` if ``identity`` is not a ``VerifyKey``.
        """
        if not isinstance(identity, VerifyKey):
            raise TypeError(f"identity must be a VerifyKey, not {type(identity).__name__}")
        self._check_fields()
        try:
            identity.verify(self.signed_bytes(), self.signature)
        except BadSignatureError:
            raise BadSignature(
                f"round key announcement of node {self.node!r} for round {self.round_id} "
                "does not verify"
            ) from None


def _announcement_message(chain_id: str, node: str, round_id: int, public_key: bytes) -> bytes:
    """Canonical signed encoding of an announcement's fields (fields already validated)."""
    return b"".join(
        (
            _length_prefixed(_ANNOUNCEMENT_DOMAIN),
            _length_prefixed(chain_id.encode("utf-8")),
            _length_prefixed(node.encode("utf-8")),
            struct.pack(">Q", round_id),
            _length_prefixed(public_key),
        )
    )


_LINK_DOMAIN = b"mixnet/link-authentication/v1"
#: Bytes of the challenge a node sends a peer that wants to authenticate.
CHALLENGE_LENGTH = 32


def _link_message(chain_id: str, node: str, challenge: bytes) -> bytes:
    return b"".join(
        (
            _length_prefixed(_LINK_DOMAIN),
            _length_prefixed(chain_id.encode("utf-8")),
            _length_prefixed(node.encode("utf-8")),
            _length_prefixed(challenge),
        )
    )


def sign_link_challenge(
    signing_key: SigningKey, *, chain_id: str, node: str, challenge: bytes
) -> bytes:
    """Answer a successor's link challenge: ``node``'s Ed25519 signature (64 bytes) over a
    domain-separated encoding of (chain id, node, challenge)."""
    if len(challenge) != CHALLENGE_LENGTH:
        raise ValueError(f"challenge must be {CHALLENGE_LENGTH} bytes")
    return bytes(signing_key.sign(_link_message(chain_id, node, challenge)).signature)


def verify_link_signature(
    identity: VerifyKey, signature: bytes, *, chain_id: str, node: str, challenge: bytes
) -> None:
    """Check a link challenge answer; raises :class:`BadSignature` if it does not verify
    (or :class:`BadLength` for a signature that is not 64 bytes)."""
    if len(signature) != SIGNATURE_LENGTH:
        raise BadLength(f"signature must be {SIGNATURE_LENGTH} bytes")
    try:
        identity.verify(_link_message(chain_id, node, challenge), signature)
    except BadSignatureError:
        raise BadSignature(f"link authentication as {node!r} failed") from None


def announce_round_key(
    signing_key: SigningKey,
    *,
    chain_id: str,
    node: str,
    round_id: int,
    public_key: bytes,
) -> RoundKeyAnnouncement:
    """Sign ``public_key`` as ``node``'s X25519 key for ``round_id`` on chain ``chain_id``.

    Raises ``TypeError`` if ``signing_key`` is not a ``SigningKey``, and
    :class:`MalformedFrame`/:class:`BadLength` for ill-typed fields or a public key that is
    not 32 bytes (checked before signing).
    """
    if not isinstance(signing_key, SigningKey):
        raise TypeError(f"signing_key must be a SigningKey, not {type(signing_key).__name__}")
    # Validate every field (with a placeholder signature) before signing anything.
    unsigned = RoundKeyAnnouncement(
        chain_id=chain_id,
        node=node,
        round_id=round_id,
        public_key=public_key,
        signature=bytes(SIGNATURE_LENGTH),
    )
    signature = signing_key.sign(unsigned.signed_bytes()).signature
    return RoundKeyAnnouncement(
        chain_id=chain_id,
        node=node,
        round_id=round_id,
        public_key=public_key,
        signature=signature,
    )


# --------------------------------------------------------------------------- round keys


class RoundKeyring:
    """A node's X25519 secret keys, one fresh key pair per round; round ids never reused.

    Lifecycle of a round id: unknown -> open (:meth:`open_round`) -> erased (:meth:`erase`).
    Once erased (or erased without ever being opened) an id can never be opened again, so a
    replayed onion from an old round cannot be decrypted by a later key for the same id.

    Erasure drops every reference this keyring holds to the key. CPython cannot guarantee
    that the key bytes are zeroed in memory (``bytes`` are immutable and PyNaCl keeps its own
    copies); the memory is freed once no other reference (e.g. a running ``peel_many``)
    remains, and may be reused later. A peel worker process (:mod:`mixnet.peel_worker`) gets
    the key's bytes with each request and drops them when it has answered. The erased-id set
    lives in memory only: a node that restarts must restore it from its own persistent state.

    Not thread-safe: use it from one thread (the event loop) and hand secret keys to worker
    threads.
    """

    def __init__(self) -> None:
        self._open: dict[int, PrivateKey] = {}
        self._erased: set[int] = set()

    @staticmethod
    def _check_round_id(round_id: object) -> int:
        if not isinstance(round_id, int) or isinstance(round_id, bool):
            raise TypeError(f"round_id must be int, not {type(round_id).__name__}")
        if not 0 <= round_id <= _MAX_ROUND_ID:
            raise ValueError(f"round_id must be in [0, 2**64), got {round_id}")
        return round_id

    def open_round(self, round_id: int) -> PrivateKey:
        """Make, keep and return a fresh X25519 key pair for ``round_id``.

        Raises ``ValueError`` if the round is already open or was erased (round ids are
        never reused), ``TypeError``/``ValueError`` for a round id that is not an int in
        ``[0, 2**64)``.
        """
        self._check_round_id(round_id)
        if round_id in self._erased:
            raise ValueError(f"round {round_id} was erased; round ids are never reused")
        if round_id in self._open:
            raise ValueError(f"round {round_id} is already open")
        key = PrivateKey.generate()
        self._open[round_id] = key
        return key

    def secret(self, round_id: int) -> PrivateKey:
        """Return the secret key of open round ``round_id``.

        Raises :class:`UnknownRound` if the round was never opened or its key was erased.
        """
        self._check_round_id(round_id)
        key = self._open.get(round_id)
        if key is None:
            if round_id in self._erased:
                raise UnknownRound(f"the key of round {round_id} has been erased")
            raise UnknownRound(f"round {round_id} is not open")
        return key

    def adopt(self, round_id: int, key: PrivateKey) -> None:
        """Hold a key restored from the node's store after a restart.

        Raises ``ValueError`` if the round is open or erased here, ``TypeError`` for a key
        that is not a :class:`~nacl.public.PrivateKey`.
        """
        self._check_round_id(round_id)
        if not isinstance(key, PrivateKey):
            raise TypeError(f"key must be a PrivateKey, not {type(key).__name__}")
        if round_id in self._erased or round_id in self._open:
            raise ValueError(f"round {round_id} is already open or erased")
        self._open[round_id] = key

    def public_key(self, round_id: int) -> bytes:
        """Return the 32-byte X25519 public key of open round ``round_id`` (:class:`UnknownRound`
        if not open)."""
        return bytes(self.secret(round_id).public_key)

    def erase(self, round_id: int) -> None:
        """Drop the key of ``round_id`` and mark the id as used forever.

        Idempotent; erasing an id that was never opened also bars it from being opened.
        """
        self._check_round_id(round_id)
        self._open.pop(round_id, None)
        self._erased.add(round_id)

    def is_open(self, round_id: int) -> bool:
        """Whether ``round_id`` currently has a key."""
        return self._check_round_id(round_id) in self._open

    def erased(self, round_id: int) -> bool:
        """Whether ``round_id`` has been erased (and so can never be opened again)."""
        return self._check_round_id(round_id) in self._erased
