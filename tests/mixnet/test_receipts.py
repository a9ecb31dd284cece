"""The entry mix's compact receipts (mixnet.core.receipts) against the dict they replace."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixnet.core.receipts import RECEIPT_DIGEST_LENGTH, ReceiptTable, client_keys

CLIENTS = [f"client-{i}" for i in range(40)]


def digest(n: int) -> bytes:
    return hashlib.blake2b(n.to_bytes(8, "big"), digest_size=RECEIPT_DIGEST_LENGTH).digest()


def agrees(table: ReceiptTable, model: dict[str, bytes], probes: list[str]) -> None:
    assert len(table) == len(model)
    assert table.matches(model)
    for client in probes:
        assert table.get(client) == model.get(client)
        assert (client in table) == (client in model)
    assert table.isdisjoint(probes) == model.keys().isdisjoint(probes)


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.lists(st.tuples(st.sampled_from(CLIENTS), st.integers(0, 5)), max_size=30),
        ),
        st.tuples(st.just("compact"), st.just([])),
        st.tuples(st.just("clear"), st.just([])),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(operations, st.lists(st.sampled_from([*CLIENTS, "nobody"]), max_size=25))
def test_property_answers_as_the_dict(
    ops: list[tuple[str, list[tuple[str, int]]]], probes: list[str]
) -> None:
    """Any mix of adds (repeated clients, replaced digests; small and vectorized calls),
    compactions and clears leaves the table answering get, in, isdisjoint and len exactly
    as a dict updated the same way."""
    table, model = ReceiptTable(), dict[str, bytes]()
    for op, pairs in ops:
        if op == "add":
            clients, digests = [c for c, _ in pairs], [digest(n) for _, n in pairs]
            table.add(clients, digests)
            model.update(zip(clients, digests, strict=True))
        elif op == "compact":
            table.compact()
            assert table.is_compact
        else:
            table.clear()
            model.clear()
            assert not table.is_compact
        agrees(table, model, probes)


def test_a_large_round_compacts_in_one_insert_and_answers_every_client() -> None:
    clients = [f"user-{i:06d}" for i in range(20_000)]
    digests = [digest(i) for i in range(20_000)]
    table = ReceiptTable(zip(clients, digests, strict=True))
    table.compact()
    assert len(table) == 20_000
    assert all(table.get(c) == d for c, d in zip(clients[::97], digests[::97], strict=True))
    assert table.isdisjoint([f"other-{i}" for i in range(500)])  # the vectorized probe
    assert not table.isdisjoint([f"other-{i}" for i in range(500)] + [clients[12_345]])
    # later receipts go to the table directly, replacing a digest in place
    table.add([clients[7], "late"], [digest(-1 % 99), digest(42)])
    assert table.get(clients[7]) == digest(-1 % 99) and table.get("late") == digest(42)
    assert len(table) == 20_001


def test_compacted_receipts_cost_about_60_bytes_each() -> None:
    """What the module promises: the key, the digest and a slot, no object per receipt
    (a dict of str to bytes takes 175 bytes or more each)."""
    n = 100_000
    table = ReceiptTable((f"client-{i:07d}", digest(i)) for i in range(n))
    assert table.nbytes() == 0  # not compacted yet: the dict holds them
    table.compact()
    assert 16 + 4 + 32 <= table.nbytes() / n <= 62


def test_bad_receipts_are_refused_whole() -> None:
    table = ReceiptTable([("a", digest(1))])
    for clients, digests, error in (
        (["b", 3], [digest(2), digest(3)], TypeError),
        (["b", "c"], [digest(2), "x" * 32], TypeError),
        (["b", "c"], [digest(2), digest(3)[:16]], ValueError),
        (["b", "c"], [digest(2)], ValueError),
    ):
        with pytest.raises(error):
            table.add(clients, digests)  # type: ignore[arg-type]
        assert table.matches({"a": digest(1)})
    table.compact()
    with pytest.raises(TypeError):
        table.add(["b", 3], [digest(2), digest(3)])  # type: ignore[list-item]
    assert table.matches({"a": digest(1)})
    with pytest.raises(TypeError):
        table.get(3)  # type: ignore[arg-type]
    assert 3 not in table
    with pytest.raises(KeyError):
        table["b"]


def test_client_keys_are_personalised_blake2b_128() -> None:
    expected = hashlib.blake2b(b"amy", digest_size=16, person=b"mixnet-client").digest()
    assert client_keys(["amy", "bob"])[:16] == expected
    assert len(client_keys(["amy", "bob"])) == 32
    with pytest.raises(TypeError):
        client_keys([b"amy"])  # type: ignore[list-item]


def test_a_compacted_copy_is_adopted_only_if_nothing_changed_since() -> None:
    """The adapter compacts a copy off the event loop; the machine adopts it unless the
    receipts changed meanwhile (then it compacts them in place: nothing is lost)."""
    table = ReceiptTable([("a", digest(1)), ("b", digest(2))])
    copy = table.compacted()
    assert copy.is_compact and not table.is_compact  # the source is left as it was
    table.adopt(copy)
    assert table.is_compact and table.matches({"a": digest(1), "b": digest(2)})

    table = ReceiptTable([("a", digest(1))])
    stale = table.compacted()
    table.add(["c"], [digest(3)])  # after the copy was made
    table.adopt(stale)
    assert table.is_compact and table.matches({"a": digest(1), "c": digest(3)})

    other = ReceiptTable([("z", digest(9))]).compacted()
    table = ReceiptTable([("z", digest(9))])
    table.adopt(other)  # another table's copy, although equal: compacted in place instead
    assert table.is_compact and table.nbytes() > 0
    table.adopt(None)
    assert table.matches({"z": digest(9)})
    assert ReceiptTable([("q", digest(4))]).compacted().compacted().matches({"q": digest(4)})


def test_a_copy_made_while_the_receipts_change_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker thread's copy that read the dict while the event loop added to it (here:
    during the hashing of the ids) is one adopt refuses; nothing is lost."""
    import mixnet.core.receipts as receipts_module

    table = ReceiptTable([(f"c{i}", digest(i)) for i in range(30)])
    hash_ids = receipts_module.client_keys

    def racing(clients: object) -> bytes:
        keys = hash_ids(clients)  # type: ignore[arg-type]
        table._open["late"] = digest(99)  # what an add on the loop's thread would do
        return keys

    monkeypatch.setattr(receipts_module, "client_keys", racing)
    copy = table.compacted()
    monkeypatch.setattr(receipts_module, "client_keys", hash_ids)
    assert len(copy) == 0
    table.adopt(copy)
    expected = {f"c{i}": digest(i) for i in range(30)} | {"late": digest(99)}
    assert table.is_compact and table.matches(expected)


def test_equality_and_no_iteration() -> None:
    """Tables compare by their receipts (open or compact), and with a mapping of client ids
    to digests; a table holds no client ids, so it cannot be iterated."""
    pairs = [("a", digest(1)), ("b", digest(2))]
    open_table, compact = ReceiptTable(pairs), ReceiptTable(pairs)
    compact.compact()
    assert open_table == compact and compact == dict(pairs) and open_table == dict(pairs)
    assert compact != ReceiptTable(pairs[:1]) and compact != {"a": digest(1), "b": digest(3)}
    assert compact != [("a", digest(1))]
    with pytest.raises(TypeError):
        iter(compact)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        hash(compact)
