"""The sans-I/O core of the mixnet: round statuses, the round policy, intake bookkeeping and
the per-role round machines. Nothing here touches sockets, clocks, sqlite or global
randomness."""

from mixnet.core.intake import (
    BatchIntake,
    ChunkOutcome,
    EntryIntake,
    drop_replays,
    mix_batch,
    split_chunks,
    submission_digest,
    uniform_permutation,
)

__all__ = [
    "BatchIntake",
    "ChunkOutcome",
    "EntryIntake",
    "drop_replays",
    "mix_batch",
    "split_chunks",
    "submission_digest",
    "uniform_permutation",
]
