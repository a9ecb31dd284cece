"""How a node process runs Python's cyclic garbage collector while it serves.

A node that takes a large round allocates a few dozen short-lived container objects per
submission (frames, actions, futures). With CPython's default thresholds the collector then
runs a young collection every 700 of them and, every few of those, walks every object of
the process, including the tens of thousands of module, class and function objects loaded
at start: measured with py-spy, 14% of the entry mix's event-loop time at 3·10⁴ users went
to ``gc_collect_main``.

:func:`settle_after_start` is called once a node process has started (its modules imported,
its store recovered, its socket bound): it moves everything alive to the permanent
generation (:func:`gc.freeze`, which the collector never walks again) and raises the young
generation's threshold. Reference counting still frees every object that is not in a cycle
at once; cycles are still collected, only less often. It is a process-wide setting, so only
a process that serves one node calls it (``cloaknet node``), never a library user or a test
that runs many nodes in one process.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_after_start"]

#: Allocations of container objects (net of deallocations) between two young collections
#: (CPython's default: 700). At a few dozen per submission this is one young collection per
#: few thousand submissions; what it leaves uncollected meanwhile (cycles only: reference
#: counting frees the rest) is at most this many objects, about 10 MB. Measured at 3·10⁴
#: users (``scripts/bench_round.py``, means of two to four runs): the entry mix's CPU fell
#: from 4.5 s to 4.1 s, about what switching the collector off gave, and no node's peak
#: RSS changed.
YOUNG_THRESHOLD = 100_000


def settle_after_start() -> None:
    """Freeze what a started node holds and collect young objects less often (see the
    module docstring). Idempotent; never raises."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
