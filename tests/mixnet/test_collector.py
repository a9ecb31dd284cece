"""mixnet.collector: a serving node process's garbage-collector setting (run in a child
process: the setting is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

from mixnet.collector import YOUNG_THRESHOLD

_CHILD = """
import gc, json
from mixnet.collector import settle_after_start
before = gc.get_threshold()
cycle = []
cycle.append(cycle)
settle_after_start()
settle_after_start()  # idempotent
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "collecting": gc.isenabled()}))
"""


def test_settle_after_start_freezes_the_process_and_collects_young_objects_less_often() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["before"][0] == 700  # CPython's default, so the test shows a change
    assert seen["after"] == [YOUNG_THRESHOLD, seen["before"][1], seen["before"][2]]
    assert seen["frozen"] > 1000  # the modules, classes and functions loaded so far
    assert seen["collecting"] is True  # cycles are still collected
