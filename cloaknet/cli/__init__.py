"""The ``cloaknet`` command line: :func:`main` (the console script ``cloaknet`` and
``python -m cloaknet``).

Commands: ``plan`` (:mod:`.plan`), ``plan-fl`` (:mod:`.fl`), ``demo``, ``node``,
``keygen`` (:mod:`.run`; ``--client`` and ``--token-for`` for admission), ``experiment``
(:mod:`.experiment`), ``chain init`` and ``submit`` (:mod:`.chain`); ``cloaknet --version``
prints the installed version. Exit codes: 0 success; 2 bad arguments, parameters, chain file
or key file (one-line message on stderr); 3 no parameters meet the requested guarantee; 4 an
operating-system error (e.g. a port in use or an unreadable file); 130 interrupted. Each
command imports what only it needs (the networked node, the experiments, rich) when it runs,
so ``cloaknet plan`` starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from cloaknet.cli.chain import add_chain_parser, add_submit_parser, cmd_chain, cmd_submit
from cloaknet.cli.experiment import add_experiment_parser, cmd_experiment
from cloaknet.cli.fl import add_plan_fl_parser, cmd_plan_fl
from cloaknet.cli.plan import add_plan_parser, cmd_plan
from cloaknet.cli.run import (
    add_demo_parser,
    add_keygen_parser,
    add_node_parser,
    cmd_demo,
    cmd_keygen,
    cmd_node,
)
from cloaknet.errors import CloakError, InfeasiblePlanError
from mixnet.errors import MixnetError

__all__ = ["EXIT_INFEASIBLE", "EXIT_OS", "EXIT_USAGE", "build_parser", "main"]

EXIT_USAGE = 2
EXIT_INFEASIBLE = 3
EXIT_OS = 4

#: Every command: its name and the function that runs it (returning the exit code).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "plan": cmd_plan,
    "plan-fl": cmd_plan_fl,
    "demo": cmd_demo,
    "node": cmd_node,
    "keygen": cmd_keygen,
    "experiment": cmd_experiment,
    "chain": cmd_chain,
    "submit": cmd_submit,
}


def build_parser() -> argparse.ArgumentParser:
    """The ``cloaknet`` argument parser with every command."""
    parser = argparse.ArgumentParser(
        prog="cloaknet",
        description="Differentially private summation in the shuffled model "
        "(the invisibility cloak of Ghazi, Pagh and Velingker, 2019).",
    )
    parser.add_argument("--version", action="version", version=f"cloaknet {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_plan_parser(sub)
    add_plan_fl_parser(sub)
    add_demo_parser(sub)
    add_node_parser(sub)
    add_experiment_parser(sub)
    add_keygen_parser(sub)
    add_chain_parser(sub)
    add_submit_parser(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cloaknet")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cloaknet`` console script; returns the exit code (module doc).
    Bad arguments make argparse exit with 2 (``SystemExit``)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InfeasiblePlanError as exc:
        print(f"cloaknet: no plan: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except (CloakError, MixnetError) as exc:
        print(f"cloaknet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"cloaknet: error: {exc}", file=sys.stderr)
        return EXIT_OS
    except KeyboardInterrupt:
        print("cloaknet: interrupted", file=sys.stderr)
        return 130
