"""What keeps the sink's memory proportional to its payloads: reading an ``Items`` a block
at a time (:meth:`Items.blocks`) and the small SQLite page cache of the sink's store."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from mixnet.chain import parse_chain_config
from mixnet.core.actions import DeliveredBatch
from mixnet.core.items import Items
from mixnet.settings import node_settings
from mixnet.sink import STORE_CACHE_KIB, SinkNode
from mixnet.store import NodeStore, StoreError
from tests.mixnet.test_chain import valid_data


def _cache_size(store: NodeStore) -> int:
    row = store._connection().execute("PRAGMA cache_size").fetchone()
    return int(row[0])


def test_blocks_cover_the_items_in_order() -> None:
    rows = np.arange(30, dtype=np.uint8).reshape(10, 3)
    items = Items(rows)
    blocks = list(items.blocks(4))
    assert [b.shape for b in blocks] == [(4, 3), (4, 3), (2, 3)]
    assert all(np.shares_memory(b, rows) for b in blocks)  # views, no copies
    assert all(not b.flags.writeable and b.flags.c_contiguous for b in blocks)
    assert np.array_equal(np.concatenate(blocks), rows)
    assert [b.shape for b in items.blocks(100)] == [(10, 3)]
    assert list(Items.empty(3).blocks(4)) == []
    with pytest.raises(ValueError, match="rows must be >= 1"):
        list(items.blocks(0))


def test_blocks_of_an_indexed_view_are_copies_in_its_order() -> None:
    rows = np.arange(20, dtype=np.uint8).reshape(10, 2)
    index = np.array([9, 0, 5, 5, 2], dtype=np.intp)
    blocks = list(Items(rows).take(index).blocks(2))
    assert [b.shape[0] for b in blocks] == [2, 2, 1]
    assert np.array_equal(np.concatenate(blocks), rows[index])
    assert b"".join(b.tobytes() for b in blocks) == Items(rows).take(index).tobytes()


def test_limit_cache_sets_the_page_cache(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "node.db") as store:
        assert _cache_size(store) == -2000  # SQLite's default
        store.limit_cache(64)
        assert _cache_size(store) == -64
        for bad in (0, -1, True, 1.5):
            with pytest.raises(ValueError, match="positive int"):
                store.limit_cache(bad)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="closed"):
        store.limit_cache(64)


class _Count:
    def analyze(self, round_id: int, batch: DeliveredBatch) -> Mapping[str, object]:
        return {"round": round_id, "messages": len(batch.payloads)}

    def aborted(self, round_id: int) -> Mapping[str, object]:
        return {"round": round_id, "status": "aborted"}


def test_the_sink_limits_its_stores_cache(tmp_path: Path) -> None:
    config = parse_chain_config(valid_data(), source="chain.toml")
    settings = node_settings(config, "sink", messages=2, payload_length=4)
    with NodeStore(tmp_path / "sink.db") as store:
        SinkNode(settings, store, _Count())
        assert _cache_size(store) == -STORE_CACHE_KIB
