"""``cloaknet plan``: print what :func:`cloaknet.plans.select_plan` chooses.

Output: a table (default), one JSON object (``--json``: the plan, plus ``alternatives``) or
the chain file's ``[round]`` and ``[protocol]`` tables (``--toml``), which load together: the
rounds are ``--users`` to ``--max-users`` users, where the guarantee was checked.
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from typing import Any

from cloaknet.certified import display_down
from cloaknet.cli.args import (
    add_privacy_args,
    non_negative_int,
    positive_float,
    positive_int,
)
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.planner import BOUNDS, DEFAULT_MAX_MESSAGES
from cloaknet.plans import SelectedPlan, select_plan
from cloaknet.protocol_table import selected_section
from cloaknet.wire_cost import WireCost, wire_cost
from mixnet.chain_render import render_table

__all__ = ["add_plan_parser", "cmd_plan"]

_BOUND_LABELS = {
    "theorem": "paper's theorem constants",
    "optimized": "seed lemmas (optimized)",
    "bbgn": "BBGN bound",
}


def add_plan_parser(sub: Any) -> None:
    """Add the ``plan`` command to the subparsers ``sub``."""
    p_plan = sub.add_parser(
        "plan",
        help="choose m, N, k, gamma, p, q for n users and a target (epsilon, delta)",
        description="Plan protocol parameters. The optimized bound searches the paper's lemmas "
        "for the fewest messages per user (then the smallest modulus, then the "
        "lowest predicted error) and recomputes the achieved (epsilon, delta) from "
        "the lemmas. --bound theorem shows the constants of the paper's Theorems "
        "1 and 2 instead, for comparison.",
    )
    add_privacy_args(p_plan, users_default=None)
    p_plan.add_argument(
        "--colluders",
        "-c",
        type=non_negative_int,
        default=0,
        help="users assumed to collude with the analyst (Lemmas 12, 13; "
        "at most 0.9·n in single-user mode); default 0",
    )
    p_plan.add_argument(
        "--bound",
        choices=("auto", *BOUNDS),
        default="auto",
        help="auto (default): whichever of the optimized seed-lemma search and "
        "the Balle-Bell-Gascon-Nissim bound needs fewer messages; "
        "optimized: the paper's lemmas; bbgn: the BBGN bound (single-user "
        "mode: split-and-mix with Polya noise); theorem: the paper's "
        "theorem constants",
    )
    p_plan.add_argument(
        "--max-users",
        type=positive_int,
        default=None,
        help="largest round the parameters must analyze (N > 3·max_users·k); default n",
    )
    p_plan.add_argument(
        "--max-rmse",
        type=positive_float,
        default=None,
        help="single-user mode: only consider plans whose predicted RMSE is at "
        "most this (trades more messages for less noise)",
    )
    p_plan.add_argument(
        "--max-messages",
        type=positive_int,
        default=DEFAULT_MAX_MESSAGES,
        help=f"search limit on messages per user (default {DEFAULT_MAX_MESSAGES})",
    )
    p_plan.add_argument(
        "--mixes",
        type=positive_int,
        default=3,
        help="mixes in the chain, for the wire bytes per user (default 3)",
    )
    p_plan.add_argument(
        "--ownership-proofs",
        action="store_true",
        help="count the wire bytes of a chain with [chain] ownership_proofs = true "
        "(48 more bytes per message per mix after the first)",
    )
    output = p_plan.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument(
        "--toml",
        action="store_true",
        help="print the chain file's [round] and [protocol] tables for these parameters "
        "(rounds of --users to --max-users users; append them to a chain file)",
    )


def _select(args: argparse.Namespace, bound: str, **overrides: Any) -> SelectedPlan:
    """:func:`select_plan` with the command line's request (``overrides`` replace options)."""
    options: dict[str, Any] = {
        "mode": args.mode,
        "max_users": args.max_users,
        "colluders": args.colluders,
        "precision": args.precision,
        "max_messages": args.max_messages,
        "max_rmse": args.max_rmse,
    }
    options.update(overrides)
    return select_plan(args.users, args.epsilon, args.delta, bound=bound, **options)


def cmd_plan(args: argparse.Namespace) -> int:
    """Run ``cloaknet plan``; returns 0 (errors propagate to :func:`cloaknet.cli.main`)."""
    chosen = _select(args, args.bound)
    result = {**chosen.to_json(), **_wire(args, chosen.to_json()).to_json()}
    others = [alternative.to_json() for alternative in chosen.alternatives]
    if args.json:
        print(json.dumps({**result, "alternatives": others}, indent=2))
        return 0
    if args.toml:
        _print_toml(chosen, result)
        return 0
    comparison = []
    if args.bound in ("auto", "optimized"):
        try:
            theorem = _select(args, "theorem", max_messages=None, max_rmse=None)
        except (ParameterError, InfeasiblePlanError):
            pass  # the theorem's constants do not apply (e.g. more than 0.9·n colluders)
        else:
            comparison.append(theorem.to_json())
    _plan_table(result, [*others, *comparison])
    if chosen.plan is not None and chosen.plan.params.noise is not None and args.max_rmse is None:
        _suggest_lower_error(args, chosen)
    return 0


def _wire(args: argparse.Namespace, result: dict[str, Any]) -> WireCost:
    """What one user's messages cost on the wire through ``--mixes`` mixes."""
    return wire_cost(
        int(result["messages_per_user"]),
        int(result["bytes_per_message"]),
        args.mixes,
        proven=args.ownership_proofs,
    )


def _print_toml(chosen: SelectedPlan, result: dict[str, Any]) -> None:
    print(
        f"# cloaknet plan: {result['mode']}, {result['bound']} bound, {result['noise']} noise, "
        f"epsilon = {result['epsilon']:.6g}, delta = {result['delta']:.4g} "
        f"({result['lemma']}, worst case at n = {result['evaluated_at_users']} users)"
    )
    from cloaknet.chain_init import check_tables, round_section

    protocol = selected_section(chosen)
    rounds = round_section(chosen)
    check_tables(rounds, protocol)  # refuses, naming the field, what no chain would load
    print(render_table("round", rounds))
    print(render_table("protocol", protocol), end="")


def _wire_meaning(result: dict[str, Any]) -> str:
    hops = result["wire_bytes_per_hop"]
    proofs = ", ownership proofs" if result["ownership_proofs"] else ""
    arriving = ", ".join(f"{name} {count:,}" for name, count in hops.items())
    return f"one submission box through {len(hops) - 1} mixes{proofs}; arriving: {arriving}"


def _plan_table(result: dict[str, Any], alternatives: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    what = "split-and-mix + Pólya noise" if result["protocol"] == "bbgn" else "the cloak"
    table = Table(
        title=f"cloaknet plan — {what}, {result['mode']}, {result['bound']} bound",
        show_header=True,
        header_style="bold",
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    rows: list[tuple[str, str, str]] = [
        ("users n", f"{result['users']:,}", "smallest round privacy is planned for"),
        ("max users", f"{result['max_users']:,}", "largest round the parameters serve"),
        ("colluders |C|", f"{result['colluders']:,}", "users assumed to reveal all to the analyst"),
        ("messages per user m", f"{result['messages_per_user']}", "shares each user sends"),
        ("modulus N", f"{result['modulus']}", f"{result['bits_per_message']} bits per message"),
        ("precision k", f"{result['precision']:,}", "inputs rounded to multiples of 1/k"),
    ]
    rows.append(
        (
            "noise",
            str(result["noise"]),
            "what each user adds (sampled exactly)" if result["noise"] != "none"
            else "no noise: sum-preserving changes",
        )
    )
    if result.get("gamma") is not None:
        rows.append(("gamma", f"{result['gamma']:.6g}", "smoothness slack of Lemma 1"))
    if result.get("noise_p") is not None:
        if result["protocol"] == "bbgn":
            rows.append(
                (
                    "noise alpha",
                    f"{result['noise_p']:.10g}",
                    "summed Pólya noise is discrete Laplace(alpha)",
                )
            )
        else:
            rows += [
                ("noise p", f"{result['noise_p']:.10g}", "D_{N,p}: mass ratio between neighbours"),
                ("noise q", f"{result['noise_q']:.6g}", "probability a user adds noise"),
            ]
    worst = f"{result['evaluated_at_users']:,}"
    rows += [
        (
            "epsilon achieved",
            display_down(Fraction(result["epsilon_exact"])),
            f"target {result['target_epsilon']:g} (exact value rounded down)",
        ),
        ("delta achieved", f"{result['delta']:.4g}", f"target {result['target_delta']:g}"),
        ("evaluated at n", worst, "round size where the bound is weakest (worst case)"),
        ("bound", str(result["lemma"]), "what the (epsilon, delta) is computed from"),
        (
            "bytes per user",
            f"{result['bytes_per_user']:,}",
            f"{result['messages_per_user']} × {result['bytes_per_message']} bytes",
        ),
        (
            "wire bytes per user",
            f"{result['wire_bytes_per_user']:,}",
            _wire_meaning(result),
        ),
        ("expected RMSE", f"{result['expected_rmse']:.4g}", "of the estimated sum, n users"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if not result.get("meets_target", True):
        console.print("[bold red]these parameters do NOT meet the target (epsilon, delta)[/]")
    for note in result.get("notes", []):
        console.print(f"note: {escape(note)}")
    for alt in alternatives:
        verdict = "meets" if alt.get("meets_target", True) else "does not meet"
        label = _BOUND_LABELS.get(alt["bound"], alt["bound"])
        console.print(
            f"{label}: m = {alt['messages_per_user']}, {alt['bits_per_message']}-bit N, "
            f"{alt['bytes_per_user']} bytes/user, "
            f"epsilon = {display_down(Fraction(alt['epsilon_exact']), 4)}, "
            f"delta = {alt['delta']:.3g} at n = {alt['evaluated_at_users']:,}, "
            f"RMSE {alt['expected_rmse']:.3g} ({verdict} the target)"
        )


def _suggest_lower_error(args: argparse.Namespace, chosen: SelectedPlan) -> None:
    """Minimising m first can leave a lot of noise; say what a few more messages buy."""
    target = chosen.expected_rmse / 2
    try:
        better = _select(args, "optimized", max_rmse=target)
    except (ParameterError, InfeasiblePlanError):
        return
    extra = better.messages - chosen.messages
    print(
        f"tip: --max-rmse {target:.3g} halves the expected error with {extra} more "
        f"message{'s' if extra != 1 else ''} per user (m = {better.messages}, "
        f"RMSE {better.expected_rmse:.3g})"
    )
