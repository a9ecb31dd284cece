"""The ``cloaknet`` command line.

Exit codes: 0 success; 2 bad arguments, parameters, chain file or key file (one-line message
on stderr); 3 no parameters meet the requested guarantee; 4 an operating-system error (e.g. a
port in use or an unreadable file); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cloaknet.errors import CloakError, InfeasiblePlanError, ParameterError
from cloaknet.params import MODES
from cloaknet.planner import BOUNDS, DEFAULT_MAX_MESSAGES, Plan, plan
from mixnet.errors import MixnetError

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INFEASIBLE = 3
EXIT_OS = 4


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
        p.add_argument(
            "--users",
            "-n",
            type=_positive_int,
            required=True,
            help="number of users n the guarantee is planned for",
        )
    else:
        p.add_argument(
            "--users",
            "-n",
            type=_positive_int,
            default=users_default,
            help=f"number of users (default {users_default})",
        )
    p.add_argument(
        "--epsilon",
        "-e",
        type=_positive_float,
        required=users_default is None,
        default=None if users_default is None else 1.0,
        help="target epsilon > 0" + ("" if users_default is None else " (default 1)"),
    )
    p.add_argument(
        "--delta",
        "-d",
        type=_probability,
        required=users_default is None,
        default=None if users_default is None else 1e-6,
        help="target delta in (0, 1)" + ("" if users_default is None else " (default 1e-6)"),
    )
    p.add_argument(
        "--precision",
        "-k",
        type=_positive_int,
        default=None,
        help="precision k: inputs are rounded down to multiples of 1/k "
        "(default 10·n, as in the paper's theorems)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="single-user",
        help="neighbouring datasets: one user's input changes (single-user, adds "
        "pre-randomizer noise) or the rounded sum is kept (sum-preserving, "
        "no noise); default single-user",
    )


def _add_experiment_args(p: argparse.ArgumentParser, *, quick: str, trials: str) -> None:
    """The options every experiment takes: --out, --quick, --trials, --jobs, --seed."""
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--trials", type=_positive_int, default=None, help=trials)
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=None,
        help="worker processes (default: the number of CPUs)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="replayable simulation randomness (default: the OS CSPRNG)",
    )


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
    p_plan.add_argument(
        "--colluders",
        "-c",
        type=_non_negative_int,
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
        type=_positive_int,
        default=None,
        help="largest round the parameters must analyze (N > 3·max_users·k); default n",
    )
    p_plan.add_argument(
        "--max-rmse",
        type=_positive_float,
        default=None,
        help="single-user mode: only consider plans whose predicted RMSE is at "
        "most this (trades more messages for less noise)",
    )
    p_plan.add_argument(
        "--max-messages",
        type=_positive_int,
        default=DEFAULT_MAX_MESSAGES,
        help=f"search limit on messages per user (default {DEFAULT_MAX_MESSAGES})",
    )
    output = p_plan.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument(
        "--toml",
        action="store_true",
        help="print the chain file's [protocol] table for these parameters",
    )

    p_demo = sub.add_parser(
        "demo",
        help="run n users through a local multi-process chain and print the result",
        description="Plan parameters, write keys and a chain file to a temporary directory, "
        "start every mix and the analyzer as separate processes on 127.0.0.1, "
        "submit random inputs for every user through the websocket client "
        "library, wait for the analyzer's result and compare it with the true "
        "sum; then stop every process. --mixes 0 runs the ideal shuffler in one "
        "process instead.",
    )
    _add_privacy_args(p_demo, users_default=1000)
    p_demo.add_argument(
        "--mixes",
        type=_non_negative_int,
        default=3,
        help="mix nodes, each a separate OS process (default 3); 0 runs the "
        "ideal shuffler in this process instead of the network",
    )
    p_demo.add_argument(
        "--protocol",
        choices=["cloak", "blanket", "cheu", "bbgn"],
        default="cloak",
        help="what the chain carries: the cloak (default; --mode applies) or a "
        "comparison protocol (privacy blanket, Cheu et al., split-and-mix "
        "with the BBGN bound); those are single-user protocols",
    )
    p_demo.add_argument(
        "--data-seed",
        type=int,
        default=None,
        help="seed for the demo's input data only (protocol randomness "
        "always comes from the OS CSPRNG)",
    )
    p_demo.add_argument(
        "--concurrency",
        type=_positive_int,
        default=32,
        help="users submitting at the same time (default 32)",
    )
    p_demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary directory (keys, chain file, databases, logs)",
    )
    p_demo.add_argument("--json", action="store_true", help="print one JSON object")

    p_node = sub.add_parser(
        "node",
        help="run one node (mix or analyzer) of a chain",
        description="Serve one node of the chain file: websockets for the protocol and HTTP "
        "GETs (/healthz, /status, and /rounds/<id> on the analyzer) on the port of "
        "the node's URL. Runs until SIGINT or SIGTERM.",
    )
    p_node.add_argument("--chain", type=Path, required=True, help="the chain file (TOML)")
    p_node.add_argument("--name", required=True, help="this node's name in the chain file")
    p_node.add_argument(
        "--key", type=Path, default=None, help="this node's identity key file (required for mixes)"
    )
    p_node.add_argument(
        "--db",
        type=Path,
        default=None,
        help="sqlite database (default: <name>.db next to the chain file)",
    )
    p_node.add_argument(
        "--listen",
        default=None,
        help="address to bind (default: the host of the node's URL; use 0.0.0.0 behind NAT)",
    )
    p_node.add_argument(
        "--dump-dir",
        type=Path,
        default=None,
        help="analyzer only, for experiments: write each round's shuffled "
        "shares to DIR/round-<id>.json (off by default)",
    )
    p_node.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )

    p_exp = sub.add_parser(
        "experiment",
        help="run an experiment that writes CSV files, PNG plots and report.md",
        description="Experiments for papers. Each writes CSV files, PNG plots and a report.md "
        "into --out.",
    )
    exp_sub = p_exp.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    exp_sub.required = True
    p_coll = exp_sub.add_parser(
        "collusion",
        help="colluding users against an exact adversary (Lemmas 1, 5, 11-13)",
        description="Simulate rounds in which the analyzer colludes with some users, attack "
        "the honest users' shares with exact Bayesian inference, and compare the "
        "realized privacy loss with the bounds of Lemmas 1, 5, 11 and 13; sweeps "
        "over m (1..20), the colluder fraction (up to and beyond 0.9 n) and colluder "
        "behaviours, plus views captured from a real networked chain.",
    )
    _add_experiment_args(
        p_coll,
        quick="small grid and few trials: under two minutes on 2 cores",
        trials="rounds per grid point (default 400, or 200 with --quick)",
    )

    p_cmp = exp_sub.add_parser(
        "compare",
        help="the paper's Figure 1 measured: the cloak against the baselines",
        description="Measure every summation protocol by simulation (the cloak in both modes, "
        "the privacy blanket, Cheu et al., split-and-mix with the BBGN bound, and "
        "the central discrete Laplace as the reference): messages and bytes per "
        "user, predicted and measured RMSE with a confidence interval. Writes "
        "compare.csv, PNG plots and report.md with the reproduced Figure 1 table.",
    )
    _add_experiment_args(
        p_cmp,
        quick="users 100,1000,10000 at epsilon 1 with 10 trials (seconds)",
        trials="rounds per cell (default 50, or 10 with --quick)",
    )
    p_cmp.add_argument(
        "--users",
        type=_int_list,
        default=None,
        help="comma-separated n values (default 100,1000,10000,100000,1000000)",
    )
    p_cmp.add_argument(
        "--epsilon",
        type=_float_list,
        default=None,
        help="comma-separated epsilons (default 0.5,1,2)",
    )
    p_cmp.add_argument("--delta", type=_probability, default=None, help="delta (default 1e-6)")
    p_cmp.add_argument("--json", action="store_true", help="print the table rows as JSON")

    p_keygen = sub.add_parser(
        "keygen",
        help="create a node's Ed25519 identity key file and print its public key",
        description="Write a new identity key file (mode 0600) and print the public key line "
        "to paste into the chain file's [[mix]] entry.",
    )
    p_keygen.add_argument("--name", required=True, help="the node's name")
    p_keygen.add_argument(
        "--out", type=Path, default=None, help="key file to write (default: <name>.key)"
    )
    return parser


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
        ("users n", f"{result['users']:,}", "privacy planned for this many users"),
        ("colluders |C|", f"{result['colluders']:,}", "users assumed to reveal all to the analyst"),
        ("messages per user m", f"{result['messages_per_user']}", "shares each user sends"),
        ("modulus N", f"{result['modulus']}", f"{result['bits_per_message']} bits per message"),
        ("precision k", f"{result['precision']:,}", "inputs rounded to multiples of 1/k"),
    ]
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
    rows += [
        ("epsilon achieved", f"{result['epsilon']:.6g}", f"target {result['target_epsilon']:g}"),
        ("delta achieved", f"{result['delta']:.4g}", f"target {result['target_delta']:g}"),
        ("bound", str(result["lemma"]), "what the (epsilon, delta) is computed from"),
        (
            "bytes per user",
            f"{result['bytes_per_user']:,}",
            f"{result['messages_per_user']} × {result['bytes_per_message']} bytes",
        ),
        ("expected RMSE", f"{result['expected_rmse']:.4g}", "of the estimated sum"),
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
        label = {
            "theorem": "paper's theorem constants",
            "optimized": "seed lemmas (optimized)",
            "bbgn": "BBGN bound",
        }.get(alt["bound"], alt["bound"])
        console.print(
            f"{label}: m = {alt['messages_per_user']}, {alt['bits_per_message']}-bit N, "
            f"{alt['bytes_per_user']} bytes/user, epsilon = {alt['epsilon']:.4g}, "
            f"delta = {alt['delta']:.3g}, RMSE {alt['expected_rmse']:.3g} ({verdict} the target)"
        )


def _bbgn_single_user(args: argparse.Namespace) -> dict[str, Any]:
    """``cloaknet plan --bound bbgn`` in single-user mode: split-and-mix with Pólya noise."""
    from cloaknet.planner import bbgn_achieved_sigma
    from cloaknet.protocols import bbgn_plan

    if args.max_rmse is not None:
        raise ParameterError("--max-rmse applies to the cloak's pre-randomizer only")
    b = bbgn_plan(args.users, args.epsilon, args.delta, args.colluders, precision=args.precision)
    sigma = bbgn_achieved_sigma(b.messages, b.honest, b.modulus)
    width = max(1, (b.bits_per_message + 7) // 8)
    return {
        "protocol": "bbgn",
        "mode": "single-user",
        "bound": "bbgn",
        "users": b.users,
        "max_users": b.users,
        "colluders": b.colluders,
        "target_epsilon": args.epsilon,
        "target_delta": args.delta,
        "messages_per_user": b.messages,
        "modulus": b.modulus,
        "precision": b.precision,
        "gamma": None,
        "noise": "polya",
        "noise_p": math.exp(b.log_alpha),
        "noise_q": 1.0,
        "epsilon": b.epsilon,
        "delta": (1 + math.exp(b.epsilon)) * 2.0**-sigma,
        "meets_target": True,
        "lemma": "BBGN (arXiv 1909.11225) + discrete Laplace",
        "bits_per_message": b.bits_per_message,
        "bytes_per_message": width,
        "bytes_per_user": b.messages * width,
        "expected_rmse": b.predicted_rmse,
        "notes": [
            "every user adds the difference of two Polya variables; the sum over the "
            "honest users is discrete Laplace (pure epsilon-DP); the chain file form is "
            '[protocol] name = "bbgn"'
        ],
    }


def _plan_candidates(args: argparse.Namespace) -> list[tuple[dict[str, Any], Plan | None]]:
    kwargs: dict[str, Any] = {
        "precision": args.precision,
        "mode": args.mode,
        "colluders": args.colluders,
        "max_users": args.max_users,
    }
    bounds = ["optimized", "bbgn"] if args.bound == "auto" else [args.bound]
    out: list[tuple[dict[str, Any], Plan | None]] = []
    for bound in bounds:
        try:
            if bound == "bbgn" and args.mode == "single-user":
                out.append((_bbgn_single_user(args), None))
                continue
            result = plan(
                args.users,
                args.epsilon,
                args.delta,
                bound=bound,
                max_messages=args.max_messages,
                max_rmse=args.max_rmse,
                **kwargs,
            )
        except (ParameterError, InfeasiblePlanError):
            if len(bounds) == 1:
                raise
            continue
        out.append((result.to_json(), result))
    if not out:
        raise InfeasiblePlanError("neither bound gives parameters for this request")
    return out


def _cmd_plan(args: argparse.Namespace) -> int:
    candidates = _plan_candidates(args)
    chosen, chosen_plan = min(
        candidates, key=lambda c: (c[0]["messages_per_user"], c[0]["bytes_per_user"])
    )
    others = [c[0] for c in candidates if c[0] is not chosen]
    if args.json:
        print(json.dumps({**chosen, "alternatives": others}, indent=2))
        return 0
    if args.toml:
        from cloaknet.chainfile import protocol_section
        from mixnet.chain import render_table

        print(
            f"# cloaknet plan: {chosen['mode']}, {chosen['bound']} bound, "
            f"epsilon = {chosen['epsilon']:.6g}, delta = {chosen['delta']:.4g} "
            f"({chosen['lemma']})"
        )
        if chosen_plan is not None:
            table = protocol_section(chosen_plan.params, chosen_plan)
        else:
            table = {
                "name": "bbgn",
                "users": args.users,
                "epsilon": args.epsilon,
                "delta": args.delta,
            }
            if args.colluders:
                table["colluders"] = args.colluders
            if args.precision is not None:
                table["precision"] = args.precision
            print(
                "# runs split-and-mix with Polya noise: set [round] min_users = max_users "
                f"= {args.users}"
            )
        print(render_table("protocol", table), end="")
        return 0
    comparison = []
    if args.bound in ("auto", "optimized"):
        kwargs: dict[str, Any] = {
            "precision": args.precision,
            "mode": args.mode,
            "colluders": args.colluders,
            "max_users": args.max_users,
        }
        comparison.append(
            plan(args.users, args.epsilon, args.delta, bound="theorem", **kwargs).to_json()
        )
    _plan_table(chosen, [*others, *comparison])
    if chosen_plan is not None and chosen_plan.params.noise is not None and args.max_rmse is None:
        _suggest_lower_error(args, chosen_plan)
    return 0


def _suggest_lower_error(args: argparse.Namespace, chosen: Plan) -> None:
    """Minimising m first can leave a lot of noise; say what a few more messages buy."""
    target = chosen.expected_rmse / 2
    try:
        better = plan(
            args.users,
            args.epsilon,
            args.delta,
            args.precision,
            args.mode,
            args.colluders,
            max_users=args.max_users,
            max_messages=args.max_messages,
            max_rmse=target,
        )
    except (ParameterError, InfeasiblePlanError):
        return
    extra = better.params.messages - chosen.params.messages
    print(
        f"tip: --max-rmse {target:.3g} halves the expected error with {extra} more "
        f"message{'s' if extra != 1 else ''} per user (m = {better.params.messages}, "
        f"RMSE {better.expected_rmse:.3g})"
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.mixes > 0:
        from cloaknet.netdemo import run_network_demo

        return run_network_demo(
            users=args.users,
            mixes=args.mixes,
            epsilon=args.epsilon,
            delta=args.delta,
            precision=args.precision,
            mode=args.mode,
            data_seed=args.data_seed,
            as_json=args.json,
            keep=args.keep,
            concurrency=args.concurrency,
            protocol=args.protocol,
        )
    if args.protocol != "cloak":
        raise ParameterError("--mixes 0 (the ideal shuffler) runs the cloak only")
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


def _cmd_node(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from cloaknet.node import run_node

    logging.basicConfig(
        level=args.log_level, format=f"%(asctime)s {args.name} %(levelname)s %(message)s"
    )
    asyncio.run(run_node(args.chain, args.name, args.key, args.db, args.listen, args.dump_dir))
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from mixnet.keys import generate_identity, public_key_text, write_key_file

    out = args.out or Path(f"{args.name}.key")
    key = generate_identity()
    write_key_file(out, key, name=args.name)
    print(f'identity = "{public_key_text(key.verify_key)}"   # {args.name}, secret in {out}')
    return 0


def _int_list(text: str) -> tuple[int, ...]:
    values = tuple(_positive_int(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected comma-separated positive integers")
    return values


def _float_list(text: str) -> tuple[float, ...]:
    values = tuple(_positive_float(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected comma-separated positive numbers")
    return values


def _cmd_experiment(args: argparse.Namespace) -> int:
    if args.experiment == "compare":
        from cloaknet.experiments.compare import CompareSettings, run_compare_experiment

        compare = CompareSettings.default(
            users=args.users,
            epsilons=args.epsilon,
            delta=args.delta,
            trials=args.trials,
            jobs=args.jobs,
            seed=args.seed,
            quick=args.quick,
        )
        result = run_compare_experiment(args.out, compare)
        if args.json:
            print(json.dumps(result["rows"], indent=2))
        else:
            print(
                f"wrote {args.out / 'report.md'} ({len(result['rows'])} rows, "
                f"{result['seconds']:.0f} s)"
            )
        return 0
    from cloaknet.experiments.collusion import CollusionSettings, run_collusion_experiment

    settings = CollusionSettings.default(
        trials=args.trials, jobs=args.jobs, seed=args.seed, quick=args.quick
    )
    summary = run_collusion_experiment(args.out, settings)
    print(
        f"wrote {args.out / 'report.md'} ({summary['rows']} attacked rounds, "
        f"{summary['seconds']:.0f} s)"
    )
    return 0


COMMANDS = {
    "plan": "_cmd_plan",
    "demo": "_cmd_demo",
    "node": "_cmd_node",
    "keygen": "_cmd_keygen",
    "experiment": "_cmd_experiment",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cloaknet`` console script; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        command: Callable[[argparse.Namespace], int] = globals()[COMMANDS[args.command]]
        return command(args)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
