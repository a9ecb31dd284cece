"""What a command loads at start: a node, ``cloaknet plan`` and ``--help`` never import
dp-accounting or scipy (about 0.65 s of CPU each time a node process starts, a restart after
a crash included); ``plan-fl`` and the Skellam accounting load dp-accounting when they run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Modules a node never needs: the FL accountant's libraries and the experiments' statistics.
HEAVY = ("dp_accounting", "scipy")


def _loaded_after(code: str) -> list[str]:
    """The :data:`HEAVY` modules a fresh interpreter holds after running ``code``."""
    report = f"import json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    probe = f"{code}\n{report}"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "code",
    [
        # every command's parser, as `cloaknet --help` and every command build it
        "from cloaknet.cli import build_parser\nbuild_parser()",
        # what `cloaknet node` imports to run a mix or the analyzer
        "import cloaknet.cli, cloaknet.node, cloaknet.analyzer_node, mixnet.node",
        # `cloaknet plan` runs its planner
        "from cloaknet.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--users', '1000', '-e', '1', '-d', '1e-6', '--json'])",
    ],
    ids=["parser", "node", "plan"],
)
def test_commands_start_without_the_fl_accountant(code: str) -> None:
    assert _loaded_after(code) == []


def test_skellam_accounting_loads_dp_accounting_when_it_runs() -> None:
    code = (
        "from cloaknet.skellam_rdp import gaussian_epsilon_dp_accounting\n"
        "assert 0 < gaussian_epsilon_dp_accounting(1.0, 10, 1e-5) < 100"
    )
    assert "dp_accounting" in _loaded_after(code)
