"""The entry mix's stored submissions of a round, in one buffer (pure).

:class:`SubmissionTable` maps each accepted client id to its submission's ``m`` items (the
inner onions its box opened to, all of one length), in acceptance order, like the
``dict[str, tuple[bytes, ...]]`` it replaces, but it stores each submission as one row of
``m × width`` bytes in a :class:`~mixnet.core.items.RowArena` and the client ids in a list:
a round of a million users costs its items' bytes plus a pointer per user, not a tuple and
``m`` ``bytes`` objects per user. :meth:`SubmissionTable.all_items` is the whole intake as
one :class:`~mixnet.core.items.Items` (what the round's permutation is applied to).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, MutableMapping, Sequence

from mixnet.core.items import Items, RowArena

__all__ = ["SubmissionTable"]


class _InOrder(ItemsView[str, Sequence[bytes]]):
    """``(client, items)`` in acceptance order, without building the client index."""

    _mapping: SubmissionTable

    def __iter__(self) -> Iterator[tuple[str, Sequence[bytes]]]:
        table = self._mapping
        for row, client in enumerate(table.clients()):
            yield client, table.row(row)


class SubmissionTable(MutableMapping[str, Sequence[bytes]]):
    """Client id → that submission's items, in acceptance order (see the module docstring).

    Every submission must have the same number of items of the same length as the first
    (``ValueError`` otherwise). A client is stored once: storing an already stored client
    raises ``ValueError`` once the client index exists, i.e. after a lookup by client id
    (the entry machine stores each client once, so it never builds the index on the way:
    acceptance, mixing and :meth:`items` go in order). Deleting one client rewrites the
    table (the machine never does; :meth:`clear` is cheap).
    """

    def __init__(self, submissions: Iterable[tuple[str, Sequence[bytes]]] = ()) -> None:
        self._clients: list[str] = []
        self._arena: RowArena | None = None
        self._shape: tuple[int, int] | None = None  # (items per submission, item length)
        self._index: dict[str, int] | None = None
        for client, items in submissions:
            self[client] = items

    @property
    def shape(self) -> tuple[int, int] | None:
        """``(items per submission, bytes per item)``, once a submission is stored."""
        return self._shape

    def clients(self) -> list[str]:
        """The client ids in acceptance order (do not modify)."""
        return self._clients

    def row(self, position: int) -> Items:
        """The items of the ``position``-th submission stored."""
        assert self._arena is not None and self._shape is not None
        messages, width = self._shape
        flat = self._arena.rows(position, position + 1)
        return Items(flat.array().reshape(messages, width))

    def all_items(self) -> Items:
        """Every stored item, submission after submission, as one ``Items``."""
        if self._arena is None or self._shape is None:
            return Items.empty()
        messages, width = self._shape
        rows = self._arena.items().array()
        return Items(rows.reshape(rows.shape[0] * messages, width))

    def _lookup(self) -> dict[str, int]:
        if self._index is None:
            self._index = {client: i for i, client in enumerate(self._clients)}
        return self._index

    def __getitem__(self, client: str) -> Sequence[bytes]:
        return self.row(self._lookup()[client])

    def __setitem__(self, client: str, items: Sequence[bytes]) -> None:
        self.put_many((client,), (items,))

    def put_many(self, clients: Sequence[str], submissions: Sequence[Sequence[bytes]]) -> None:
        """Store ``submissions[i]`` for ``clients[i]``, in that order, as one copy into the
        buffer (what ``table[client] = items`` does for each, without a row copy each).

        :raises ValueError: the sequences differ in length; a submission is not bytes of one
            length, or not of the table's shape; a client is stored already (checked once
            the client index exists, see the class). Nothing is stored then.
        """
        if len(clients) != len(submissions):
            raise ValueError("one submission per client")
        if not clients:
            return
        rows: list[bytes] = []
        shape = self._shape
        for items in submissions:
            if isinstance(items, Items):
                this, row = (len(items), items.width), items.tobytes()
            else:
                seq = tuple(items)
                if not set(map(type, seq)) <= {bytes} or len(set(map(len, seq))) > 1:
                    raise ValueError("a submission's items are bytes of one length")
                this, row = (len(seq), len(seq[0]) if seq else 0), b"".join(seq)
            if shape is None:
                if not this[0]:
                    raise ValueError("a submission has at least one item")
                shape = this
            elif this != shape:
                raise ValueError(f"every submission holds {shape[0]} items of "
                                 f"{shape[1]} bytes")  # fmt: skip
            rows.append(row)
        if self._index is not None:
            if len(set(clients)) != len(clients) or any(c in self._index for c in clients):
                raise ValueError("a client is stored already")
            for offset, client in enumerate(clients):
                self._index[client] = len(self._clients) + offset
        assert shape is not None  # the loop ran at least once
        if self._arena is None:
            self._shape = shape
            self._arena = RowArena(shape[0] * shape[1], 1024)
        if len(rows) == 1:
            self._arena.append_row(rows[0])
        else:
            self._arena.append(b"".join(rows))
        self._clients.extend(clients)

    def __delitem__(self, client: str) -> None:
        position = self._lookup()[client]
        kept = [(c, self.row(i)) for i, c in enumerate(self._clients) if i != position]
        self.clear()
        for other, items in kept:
            self[other] = items

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, client: object) -> bool:
        return client in self._lookup()

    def items(self) -> ItemsView[str, Sequence[bytes]]:
        return _InOrder(self)

    def clear(self) -> None:
        self._clients = []
        self._arena = None
        self._shape = None
        self._index = None

    def __repr__(self) -> str:
        return f"SubmissionTable({len(self)} submissions)"
