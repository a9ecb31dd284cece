"""``cloaknet experiment collusion|compare|fl``: the experiments that write reports."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cloaknet.cli.args import (
    add_experiment_args,
    float_list,
    int_list,
    positive_float,
    positive_int,
    probability,
)

__all__ = ["add_experiment_parser", "cmd_experiment"]


def add_experiment_parser(sub: Any) -> None:
    """Add the ``experiment`` command and its subcommands to the subparsers ``sub``."""
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
    add_experiment_args(
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
    add_experiment_args(
        p_cmp,
        quick="users 100,1000,10000 at epsilon 1 with 10 trials (seconds)",
        trials="rounds per cell (default 50, or 10 with --quick)",
    )
    p_cmp.add_argument(
        "--users",
        type=int_list,
        default=None,
        help="comma-separated n values (default 100,1000,10000,100000,1000000)",
    )
    p_cmp.add_argument(
        "--epsilon",
        type=float_list,
        default=None,
        help="comma-separated epsilons (default 0.5,1,2)",
    )
    p_cmp.add_argument("--delta", type=probability, default=None, help="delta (default 1e-6)")
    p_cmp.add_argument("--json", action="store_true", help="print the table rows as JSON")

    p_fl = exp_sub.add_parser(
        "fl",
        help="FedAvg on the digits: cloaknet vs central DP vs non-private at the same (ε, δ)",
        description="Federated averaging of a logistic regression on scikit-learn's bundled "
        "handwritten digits, every round's update sum through cloaknet's vector pipeline "
        "(clipping, rounding, Skellam noise, split-and-mix, shuffle, analyze), compared with "
        "non-private FedAvg and central DP-FedAvg (trusted Gaussian noise) at the same "
        "(epsilon, delta) over the whole training. Writes rounds.csv, summary.csv, "
        "accuracy_vs_round.png, accuracy_vs_epsilon.png and report.md.",
    )
    add_experiment_args(
        p_fl,
        quick="epsilon 1 and 3, 2 repeats, no per-user timing round: under a minute",
        trials="independent trainings per epsilon (default 5, or 2 with --quick)",
    )
    p_fl.add_argument("--clients", type=positive_int, default=None,
                      help="clients n, all in every round (default 300)")
    p_fl.add_argument("--rounds", type=positive_int, default=None,
                      help="training rounds T (default 10)")
    p_fl.add_argument("--epsilon", type=positive_float, default=None,
                      help="headline epsilon for the whole training (default 3)")
    p_fl.add_argument("--epsilons", type=float_list, default=None,
                      help="comma-separated epsilons of the sweep (default 1,2,3,5,8; "
                      "1,3 with --quick)")
    p_fl.add_argument("--delta", type=probability, default=None, help="delta (default 1e-5)")
    p_fl.add_argument("--non-iid", action="store_true",
                      help="two label shards per client instead of an IID split")
    p_fl.add_argument("--network", action="store_true",
                      help="send every cloaknet round through a real local chain (mix and "
                      "analyzer processes on 127.0.0.1, started and stopped here); sweeps "
                      "only the headline epsilon, 1 repeat; with --quick 10 clients, 1 round")
    p_fl.add_argument("--mixes", type=positive_int, default=3,
                      help="mixes in the --network chain (default 3)")
    p_fl.add_argument("--json", action="store_true", help="print the result as one JSON object")


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run the chosen experiment into ``--out`` and print where the report is."""
    if args.experiment == "fl":
        from cloaknet.experiments.fl import FLSettings, run_fl_experiment

        fl_settings = FLSettings.default(
            quick=args.quick, clients=args.clients, rounds=args.rounds,
            epsilon=args.epsilon,
            epsilons=None if args.epsilons is None else tuple(args.epsilons),
            delta=args.delta, repeats=args.trials, non_iid=args.non_iid, seed=args.seed,
            network=args.network, mixes=args.mixes,
        )
        fl_result = run_fl_experiment(args.out, fl_settings)
        if args.json:
            print(json.dumps(fl_result, indent=2))
        else:
            print(
                f"wrote {args.out / 'report.md'} (accuracy {fl_result['accuracy']:.4f}, "
                f"central DP {fl_result['accuracy_central_dp']:.4f}, "
                f"{fl_result['seconds_total']:.0f} s)"
            )
        return 0
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
