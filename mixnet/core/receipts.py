"""The entry mix's receipts of a round, compact: client id → submission digest (pure).

A receipt (``docs/protocol.md``, "Round machines") lets the entry mix acknowledge an exact
retry of a stored submission again, in every round status and after a restart, until it
opens the round :data:`~mixnet.core.entry_restore.RECEIPT_ROUNDS` (16) rounds later. So it
holds one per user of its last 16 rounds. As a ``dict`` of client id strings to 32-byte
``bytes`` a receipt costs 175 bytes (ids like ``client-0000001``) to 238 bytes (UUIDs),
measured on this project's machine: about 3 GB for 16 rounds of a million users.

:class:`ReceiptTable` keeps no string and no ``bytes`` object per receipt: the client id's
16-byte *key* (:func:`client_keys`, BLAKE2b-128 personalised ``mixnet-client``) sits in a
:class:`~mixnet.core.digest_table.DigestTable` whose owner is a row of one buffer of 32-byte
digests: 59 to 85 bytes per receipt, as the table's load varies between its growths.
It answers exactly as the ``dict`` did unless two client ids share a 128-bit key: about
``n²/2¹²⁹`` for ``n`` receipts of a round (≈ 10⁻²⁷ for a million), and no one can aim a
collision at another client's id (a second preimage of BLAKE2b-128) — the round's replay
filters rest on 16-byte digests in the same way. The client ids themselves stay in the
store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from mixnet.core.digest_table import DIGEST_LENGTH, DigestTable, all_distinct, split_digests

__all__ = ["RECEIPT_DIGEST_LENGTH", "ReceiptTable", "client_keys"]

#: Bytes of a receipt's digest (:func:`~mixnet.core.intake.submission_digest`).
RECEIPT_DIGEST_LENGTH = 32
#: Calls of up to this many clients go one by one (a vectorized probe costs a dozen numpy
#: calls whatever its size).
_SCALAR_CALL = 16

_CLIENT_HASH = hashlib.blake2b(digest_size=DIGEST_LENGTH, person=b"mixnet-client")


def client_keys(clients: Iterable[str]) -> bytes:
    """The 16-byte key of each client id (BLAKE2b-128 of its UTF-8, personalised
    ``mixnet-client``), concatenated in order.

    :raises TypeError: a client id is not a ``str``.
    :raises UnicodeEncodeError: a client id is not encodable (a lone surrogate).
    """
    copy = _CLIENT_HASH.copy
    keys: list[bytes] = []
    append = keys.append
    for client in clients:
        if not isinstance(client, str):
            raise TypeError("a client id is a str")
        h = copy()
        h.update(client.encode())
        append(h.digest())
    return b"".join(keys)


def _split(keys: bytes) -> list[bytes]:
    """The 16-byte keys of ``keys`` (concatenated)."""
    return [keys[i : i + DIGEST_LENGTH] for i in range(0, len(keys), DIGEST_LENGTH)]


def _halves(key: bytes, at: int) -> tuple[int, int]:
    start = at * DIGEST_LENGTH
    return (
        int.from_bytes(key[start : start + 8], "little"),
        int.from_bytes(key[start + 8 : start + DIGEST_LENGTH], "little"),
    )


class ReceiptTable:
    """Client id → the 32-byte digest of its stored submission, for one round (see the
    module docstring).

    While the round takes submissions its receipts are added to a ``dict`` (the entry mix's
    hot path pays nothing for compactness: the ids and digests are held by the intake
    anyway); once the round is confirmed and its intake dropped, a :meth:`compacted`
    copy made in a worker thread replaces them (:meth:`adopt`; or :meth:`compact` in
    place). Receipts added after that go to the table directly. Not iterable once compacted:
    the table holds no client ids.
    """

    def __init__(self, receipts: Iterable[tuple[str, bytes]] = ()) -> None:
        self._open: dict[str, bytes] = {}  # not compacted yet (disjoint from the table)
        self._table: DigestTable | None = None  # allocated by the first compacted receipt
        self._rows = bytearray()  # row i: the digest of the table entry whose owner is i
        self._version = 0  # counts the changes (see compacted and adopt)
        self._identity = object()
        # made by compacted(): (identity, version) of the table it copies
        self._built_from: tuple[object, int] | None = None
        pairs = list(receipts)
        self.add([c for c, _ in pairs], [d for _, d in pairs])

    @property
    def is_compact(self) -> bool:
        """Whether the receipts are in the compact table (after :meth:`compact` or
        :meth:`adopt`, until :meth:`clear`)."""
        return self._table is not None

    def __len__(self) -> int:
        return len(self._open) + (0 if self._table is None else len(self._table))

    def __contains__(self, client: object) -> bool:
        return isinstance(client, str) and self.get(client) is not None

    def get(self, client: str) -> bytes | None:
        """The digest of ``client``'s receipt, or ``None`` if it has none.

        :raises TypeError: ``client`` is not a ``str``.
        """
        if not isinstance(client, str):
            raise TypeError("a client id is a str")
        digest = self._open.get(client)
        if digest is not None or self._table is None:
            return digest
        row = self._table.get(*_halves(client_keys((client,)), 0))
        if row is None:
            return None
        start = row * RECEIPT_DIGEST_LENGTH
        return bytes(self._rows[start : start + RECEIPT_DIGEST_LENGTH])

    def __getitem__(self, client: str) -> bytes:
        digest = self.get(client)
        if digest is None:
            raise KeyError(client)
        return digest

    def isdisjoint(self, clients: Sequence[str]) -> bool:
        """Whether none of ``clients`` has a receipt.

        :raises TypeError: a client id is not a ``str`` (checked where the table is asked).
        """
        if not self._open.keys().isdisjoint(clients):
            return False
        if self._table is None or not clients:
            return True
        keys, table = client_keys(clients), self._table
        if len(clients) <= _SCALAR_CALL:
            return all(table.get(*_halves(keys, i)) is None for i in range(len(clients)))
        hi, lo = split_digests(keys)
        if bool((table.find_many(hi, lo) >= 0).any()):
            return False
        return table.get(0, 0) is None or not bool(((hi == 0) & (lo == 0)).any())

    def add(self, clients: Sequence[str], digests: Sequence[bytes]) -> None:
        """Give ``clients[i]`` the receipt ``digests[i]``, replacing the one it had (as
        ``dict.update`` does, the last of a client repeated in the call stays).

        :raises TypeError: a client id is not a ``str`` or a digest not ``bytes``.
        :raises ValueError: the sequences differ in length, or a digest is not 32 bytes.
            Nothing is added then.
        """
        if len(digests) != len(clients):
            raise ValueError("one digest per client")
        for client, digest in zip(clients, digests, strict=True):
            if not isinstance(client, str):
                raise TypeError("a client id is a str")
            if not isinstance(digest, bytes):
                raise TypeError("a receipt's digest is bytes")
            if len(digest) != RECEIPT_DIGEST_LENGTH:
                raise ValueError(f"a receipt's digest is {RECEIPT_DIGEST_LENGTH} bytes")
        self._version += 1
        if self._table is None:
            self._open.update(zip(clients, digests, strict=True))
        else:
            self._put(client_keys(clients), digests)

    def compacted(self) -> ReceiptTable:
        """A compacted copy (see :meth:`compact`), leaving this table as it is: for a worker
        thread while the event loop goes on reading this one (10⁵ receipts take about 0.06 s
        of CPU, mostly hashing their ids); hand it to :meth:`adopt`. If the receipts change
        while it reads them, the copy is one that :meth:`adopt` refuses."""
        # the version first: a change while copying then makes adopt refuse the copy
        version = self._version
        copy = ReceiptTable()
        if self._table is not None:
            copy._table, copy._rows = self._table.copy(), bytearray(self._rows)
        try:
            copy._load(self._open)
        except RuntimeError:  # the dict changed size while it was read
            return ReceiptTable()
        copy._built_from = (self._identity, version)
        return copy

    def adopt(self, compacted: ReceiptTable | None) -> None:
        """Take the receipts of ``compacted``, a :meth:`compacted` copy of this table, if
        nothing changed here since it was made; otherwise (or given ``None``)
        :meth:`compact` this table in place."""
        source = None if compacted is None else compacted._built_from
        if source is None or source[0] is not self._identity or source[1] != self._version:
            self.compact()
            return
        assert compacted is not None
        self._open, self._table, self._rows = {}, compacted._table, compacted._rows
        self._version += 1

    def compact(self) -> None:
        """Move the receipts added so far into the table: from here on each costs its key,
        its digest and its slot, and no ``str`` or ``bytes`` object (one vectorized insert;
        on the calling thread: see :meth:`compacted` for a worker thread)."""
        self._version += 1
        source, self._open = self._open, {}
        self._load(source)

    def _load(self, source: dict[str, bytes]) -> None:
        """Put the receipts of ``source`` into the table (allocated if need be), without
        copying the dict: into an empty table, the keys and the digests are joined into two
        buffers and inserted in one vectorized step.

        :raises RuntimeError: ``source`` changed size while it was read.
        """
        table = self._table
        if table is None:
            table = self._table = DigestTable(owners=True, capacity=len(source))
        if not source:
            return
        if len(table):
            self._put(client_keys(source), list(source.values()))
            return
        count = len(source)
        packed = client_keys(source)
        rows = bytearray().join(source.values())
        if len(packed) != DIGEST_LENGTH * count or len(rows) != RECEIPT_DIGEST_LENGTH * count:
            raise RuntimeError("the receipts changed while they were read")
        hi, lo = split_digests(packed)
        if all_distinct(packed) and not bool(((hi == 0) & (lo == 0)).any()):
            table.insert_new(hi, lo, np.arange(count, dtype=np.int32))
            self._rows = rows
            return
        self._put(packed, list(source.values()))  # two ids with one key: one by one

    def _put(self, keys: bytes, digests: Sequence[bytes]) -> None:
        """Insert or replace the table's receipts of ``keys`` one by one."""
        table = self._table
        assert table is not None
        for i, digest in enumerate(digests):
            hi, lo = _halves(keys, i)
            row = table.get(hi, lo)
            if row is None:
                table.put(hi, lo, len(self._rows) // RECEIPT_DIGEST_LENGTH)
                self._rows += digest
            else:
                start = row * RECEIPT_DIGEST_LENGTH
                self._rows[start : start + RECEIPT_DIGEST_LENGTH] = digest

    def matches(self, receipts: Mapping[str, bytes]) -> bool:
        """Whether its receipts are exactly ``receipts`` (as many, and each client's digest
        the same)."""
        return len(self) == len(receipts) and all(
            self.get(client) == digest for client, digest in receipts.items()
        )

    def _pairs(self) -> set[tuple[bytes, bytes]]:
        """Every receipt as (client key, digest)."""
        pairs = set(zip(_split(client_keys(self._open)), self._open.values(), strict=True))
        if self._table is not None:
            for hi, lo, row in self._table.entries():
                start = row * RECEIPT_DIGEST_LENGTH
                key = hi.to_bytes(8, "little") + lo.to_bytes(8, "little")
                pairs.add((key, bytes(self._rows[start : start + RECEIPT_DIGEST_LENGTH])))
        return pairs

    def __eq__(self, other: object) -> bool:
        """Equal to another table with the same receipts, or to a ``Mapping`` of client ids
        to digests that :meth:`matches`."""
        if isinstance(other, ReceiptTable):
            return len(self) == len(other) and self._pairs() == other._pairs()
        if isinstance(other, Mapping):
            return self.matches(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable
    __iter__ = None  # holds no client ids: not iterable (not by __getitem__ either)

    def clear(self) -> None:
        """Drop every receipt (and the memory they took); the next ones go to the ``dict``
        again."""
        self._version += 1
        self._open = {}
        self._table = None
        self._rows = bytearray()

    def nbytes(self) -> int:
        """Bytes of the table and its digests' buffer (the ``dict``'s are not counted)."""
        table = 0 if self._table is None else self._table.nbytes()
        return table + len(self._rows)

    def __repr__(self) -> str:
        state = "compact" if self.is_compact else "open"
        return f"ReceiptTable({len(self)} receipts, {state})"
