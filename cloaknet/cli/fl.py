"""``cloaknet plan-fl``: plan a federated-learning run of vector sums with distributed Skellam
noise (:func:`cloaknet.fl_accounting.plan_fl`).

Given the dimension d, the clipping norm C, the number of training rounds T, the users per
round n and the target (ε, δ) for the *whole* training, it prints the scale, the noise, the
modulus, the messages per coordinate, the bytes per user and round, the guarantee and the
expected per-coordinate error (a table, or one JSON object with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from cloaknet.cli.args import non_negative_int, positive_float, positive_int, probability
from cloaknet.fl_accounting import (
    DEFAULT_BETA,
    DEFAULT_OVERHEAD,
    DEFAULT_SPLIT_AND_MIX_SHARE,
    NEIGHBOURING,
    plan_fl,
)

__all__ = ["add_plan_fl_parser", "cmd_plan_fl"]


def add_plan_fl_parser(sub: Any) -> None:
    """Add the ``plan-fl`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "plan-fl",
        help="plan vector sums over T training rounds (clipping, Skellam noise, split-and-mix)",
        description="Plan a federated-learning run: every round each of n users sends a "
        "d-dimensional update clipped to L2 norm C; the noise, scale, modulus and messages "
        "are chosen so that the whole training of T rounds is (epsilon, delta)-DP "
        "(Skellam RDP composed over the rounds, plus the split-and-mix distance of every "
        "coordinate and round).",
    )
    p.add_argument("--dimension", type=positive_int, required=True, help="vector dimension d")
    p.add_argument("--clip", type=positive_float, required=True, help="L2 clipping norm C")
    p.add_argument("--rounds", type=positive_int, required=True, help="training rounds T")
    p.add_argument("--users", "-n", type=positive_int, required=True,
                   help="users per round (privacy is planned for this many)")
    p.add_argument("--epsilon", "-e", type=positive_float, required=True,
                   help="target epsilon for the whole training")
    p.add_argument("--delta", "-d", type=probability, required=True,
                   help="target delta for the whole training")
    p.add_argument("--colluders", "-c", type=non_negative_int, default=0,
                   help="users assumed to reveal their noise and shares to the analyst")
    p.add_argument("--max-users", type=positive_int, default=None,
                   help="largest round the window and modulus must serve (default n)")
    p.add_argument("--neighbouring", choices=NEIGHBOURING, default="replace",
                   help="replace one user's vector (default) or zero it out")
    p.add_argument("--scale", type=positive_int, default=None,
                   help="the scale s (default: the least within --overhead of the limit)")
    p.add_argument("--overhead", type=positive_float, default=DEFAULT_OVERHEAD,
                   help=f"error overhead over the s -> infinity limit (default {DEFAULT_OVERHEAD})")
    p.add_argument("--beta", type=probability, default=DEFAULT_BETA,
                   help="probability that a conditional rounding is redrawn "
                   f"(default 2^-20 = {DEFAULT_BETA:.3g})")
    p.add_argument("--split-and-mix-share", type=probability,
                   default=DEFAULT_SPLIT_AND_MIX_SHARE,
                   help="share of delta for the split-and-mix distance "
                   f"(default {DEFAULT_SPLIT_AND_MIX_SHARE})")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_plan_fl(args: argparse.Namespace) -> int:
    """Run ``cloaknet plan-fl``; returns 0 (errors propagate to :func:`cloaknet.cli.main`)."""
    made = plan_fl(
        args.dimension,
        args.clip,
        args.rounds,
        args.epsilon,
        args.delta,
        args.users,
        colluders=args.colluders,
        max_users=args.max_users,
        neighbouring=args.neighbouring,
        scale=args.scale,
        overhead=args.overhead,
        beta=args.beta,
        split_and_mix_share=args.split_and_mix_share,
    )
    result = made.to_json()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _table(result)
    return 0


def _table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"cloaknet plan-fl — d = {r['dimension']:,}, C = {r['clip']:g}, "
        f"T = {r['rounds']:,} rounds, n = {r['users']:,}",
        header_style="bold",
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    rows = [
        ("scale s", f"{r['scale']:,}", "inputs × s are rounded to integers"),
        ("norm bound B²", f"{r['norm_bound_sq']:,}", "conditional rounding keeps ‖x̃‖² <= B²"),
        ("sensitivity Δ₂², Δ₁", f"{r['l2_sensitivity_sq']:,}, {r['l1_sensitivity']:,}",
         f"{r['neighbouring']} one user's vector (integer units)"),
        ("noise μ", f"{r['noise_variance']:,}",
         "Skellam variance per coordinate, all honest users"),
        ("per user", str(r["noise_variance_per_user"]), "Skellam variance each user adds"),
        ("modulus q", f"{r['modulus']:,}", f"window ±{r['window']:,}"),
        ("messages m", f"{r['messages']}", "per coordinate (split-and-mix)"),
        ("message", f"{r['bytes_per_message']} bytes",
         f"{r['index_bytes']} index + {r['share_bytes']} share"),
        ("bytes per user", f"{r['bytes_per_user']:,}", "per round: d·m messages"),
        ("epsilon", f"{math.floor(r['epsilon_achieved'] * 1e6) / 1e6:.6f}",
         f"target {r['epsilon']:g}, whole training (RDP order {r['rdp_order']})"),
        ("delta", f"{r['delta_achieved']:.4g}",
         f"target {r['delta']:g}: RDP {r['delta_rdp']:.3g} + split-and-mix "
         f"{r['split_and_mix_delta']:.3g}"),
        ("wrap-around", f"{r['wrap_probability']:.2g}",
         "probability any coordinate leaves the window (accuracy only)"),
        ("expected error", f"{r['predicted_rmse']:.4g}",
         "RMSE per coordinate of the sum of n clipped updates"),
        ("  of the mean", f"{r['predicted_rmse_mean']:.4g}", "divided by n"),
        ("central Gaussian", f"{r['central_gaussian_rmse']:.4g}",
         "RMSE with a trusted curator at the same (epsilon, delta): "
         f"cloaknet's is {r['predicted_rmse'] / r['central_gaussian_rmse']:.3f}×"),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
