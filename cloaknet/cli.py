"""The ``cloaknet`` command line.

Exit codes: 0 success; 2 bad arguments or parameters (one-line message on stderr);
3 no parameters meet the requested guarantee; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from cloaknet.errors import CloakError, InfeasiblePlanError
from cloaknet.params import MODES
from cloaknet.planner import BOUNDS, DEFAULT_MAX_MESSAGES, Plan, plan

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INFEASIBLE = 3


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _add_privacy_args(p: argparse.ArgumentParser, *, users_default: int | None) -> None:
    if users_default is None:
        p.add_argument("--users", "-n", type=_positive_int, required=True,
                       help="number of users n the guarantee is planned for")
    else:
        p.add_argument("--users", "-n", type=_positive_int, default=users_default,
                       help=f"number of users (default {users_default})")
    p.add_argument("--epsilon", "-e", type=_positive_float,
                   required=users_default is None, default=None if users_default is None else 1.0,
                   help="target epsilon > 0" + ("" if users_default is None else " (default 1)"))
    p.add_argument("--delta", "-d", type=_probability,
                   required=users_default is None, default=None if users_default is None else 1e-6,
                   help="target delta in (0, 1)" + ("" if users_default is None
                                                    else " (default 1e-6)"))
    p.add_argument("--precision", "-k", type=_positive_int, default=None,
                   help="precision k: inputs are rounded down to multiples of 1/k "
                        "(default 10·n, as in the paper's theorems)")
    p.add_argument("--mode", choices=MODES, default="single-user",
                   help="neighbouring datasets: one user's input changes (single-user, adds "
                        "pre-randomizer noise) or the rounded sum is kept (sum-preserving, "
                        "no noise); default single-user")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cloaknet",
        description="Differentially private summation in the shuffled model "
                    "(the invisibility cloak of Ghazi, Pagh and Velingker, 2019).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p_plan = sub.add_parser(
        "plan",
        help="choose m, N, k, gamma, p, q for n users and a target (epsilon, delta)",
        description="Plan protocol parameters. The optimized bound searches the paper's lemmas "
                    "for the fewest messages per user (then the smallest modulus, then the "
                    "lowest predicted error) and recomputes the achieved (epsilon, delta) from "
                    "the lemmas. --bound theorem shows the constants of the paper's Theorems "
                    "1 and 2 instead, for comparison.",
    )
    _add_privacy_args(p_plan, users_default=None)
    p_plan.add_argument("--colluders", "-c", type=_non_negative_int, default=0,
                        help="users assumed to collude with the analyst (Lemmas 12, 13; "
                             "at most 0.9·n in single-user mode); default 0")
    p_plan.add_argument("--bound", choices=BOUNDS, default="optimized",
                        help="optimized search (default) or the paper's theorem constants")
    p_plan.add_argument("--max-users", type=_positive_int, default=None,
                        help="largest round the parameters must analyze (N > 3·max_users·k); "
                             "default n")
    p_plan.add_argument("--max-rmse", type=_positive_float, default=None,
                        help="single-user mode: only consider plans whose predicted RMSE is at "
                             "most this (trades more messages for less noise)")
    p_plan.add_argument("--max-messages", type=_positive_int, default=DEFAULT_MAX_MESSAGES,
                        help=f"search limit on messages per user (default "
                             f"{DEFAULT_MAX_MESSAGES})")
    p_plan.add_argument("--json", action="store_true", help="print one JSON object")

    p_demo = sub.add_parser(
        "demo",
        help="run n users through encode -> shuffle -> analyze and print the result",
        description="Plan parameters, encode random inputs for every user with the CSPRNG, "
                    "shuffle all messages uniformly, run the analyzer, and compare the "
                    "estimate with the true sum. (Runs in one process until the networked "
                    "mixnet lands.)",
    )
    _add_privacy_args(p_demo, users_default=1000)
    p_demo.add_argument("--data-seed", type=int, default=None,
                        help="seed for the demo's input data only (protocol randomness "
                             "always comes from the OS CSPRNG)")
    p_demo.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _plan_table(result: Plan, comparison: Plan | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"cloaknet plan — {result.mode}, {result.bound} bound",
                  show_header=True, header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    prm = result.params
    rows: list[tuple[str, str, str]] = [
        ("users n", f"{result.users:,}", "privacy planned for this many users"),
        ("colluders |C|", f"{result.colluders:,}", "users assumed to reveal all to the analyst"),
        ("messages per user m", f"{prm.messages}", "shares each user sends"),
        ("modulus N", f"{prm.modulus}", f"{prm.bits_per_message} bits per message"),
        ("precision k", f"{prm.precision:,}", "inputs rounded down to multiples of 1/k"),
        ("gamma", f"{result.gamma:.6g}", "smoothness slack of Lemma 1"),
    ]
    if prm.noise is not None:
        rows += [
            ("noise p", f"{prm.noise.p:.10g}", "D_{N,p}: mass ratio between neighbours"),
            ("noise q", f"{float(prm.noise.q):.6g}", "probability a user adds noise"),
        ]
    rows += [
        ("epsilon achieved", f"{result.epsilon:.6g}", f"target {result.target_epsilon:g}"),
        ("delta achieved", f"{result.delta:.4g}", f"target {result.target_delta:g}"),
        ("bound", result.guarantee.lemma, "lemma the (epsilon, delta) is recomputed from"),
        ("bytes per user", f"{result.bytes_per_user:,}",
         f"{prm.messages} × {prm.share_bytes} bytes"),
        ("expected RMSE", f"{result.expected_rmse:.4g}", "of the estimated sum"),
        ("worst rounding error", f"{result.rounding_error_worst:.4g}", "n/k"),
        ("noise std", f"{result.noise_std:.4g}", "pre-randomizer, Lemma 8 bound"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if not result.meets_target:
        console.print("[bold red]these parameters do NOT meet the target (epsilon, delta)[/]")
    for note in result.notes:
        console.print(f"note: {note}")
    if comparison is not None:
        verdict = "meets" if comparison.meets_target else "does not meet"
        console.print(
            f"paper's theorem constants: m = {comparison.params.messages}, "
            f"{comparison.params.bits_per_message}-bit N, epsilon = {comparison.epsilon:.4g}, "
            f"delta = {comparison.delta:.3g} ({verdict} the target)"
        )


def _cmd_plan(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {
        "precision": args.precision,
        "mode": args.mode,
        "colluders": args.colluders,
        "max_users": args.max_users,
    }
    result = plan(args.users, args.epsilon, args.delta, bound=args.bound,
                  max_messages=args.max_messages, max_rmse=args.max_rmse, **kwargs)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    comparison = None
    if args.bound == "optimized":
        comparison = plan(args.users, args.epsilon, args.delta, bound="theorem", **kwargs)
    _plan_table(result, comparison)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from cloaknet.demo import run_demo

    return run_demo(
        users=args.users,
        epsilon=args.epsilon,
        delta=args.delta,
        precision=args.precision,
        mode=args.mode,
        data_seed=args.data_seed,
        as_json=args.json,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cloaknet`` console script; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            return _cmd_plan(args)
        return _cmd_demo(args)
    except InfeasiblePlanError as exc:
        print(f"cloaknet: no plan: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except CloakError as exc:
        print(f"cloaknet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cloaknet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
