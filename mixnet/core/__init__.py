"""The sans-I/O core of the mixnet: round statuses, the round policy, intake bookkeeping and
the per-role round machines. Nothing here touches sockets, clocks, sqlite or global
randomness."""

from mixnet.core.intake import (
    MAX_CLIENT_ID_LENGTH,
    BatchIntake,
    ChunkOutcome,
    EntryIntake,
    IntakePolicy,
    drop_duplicates,
    mix_batch,
    onion_digest,
    split_chunks,
    uniform_permutation,
)

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "BatchIntake",
    "ChunkOutcome",
    "EntryIntake",
    "IntakePolicy",
    "drop_duplicates",
    "mix_batch",
    "onion_digest",
    "split_chunks",
    "uniform_permutation",
]
