"""What ``cloaknet demo`` runs: the plan ``cloaknet plan`` prints, or a protocol by name.

:func:`choose` is shared by the in-process demo (:mod:`cloaknet.demo`) and the networked one
(:mod:`cloaknet.netdemo`), so both run exactly what ``cloaknet plan`` selects for the same
arguments: :func:`cloaknet.plans.select_plan` with the same ``mode``, ``bound`` (default
``auto``) and ``precision``, for rounds of exactly ``users`` users.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cloaknet import certified
from cloaknet.errors import ParameterError
from cloaknet.params import CloakParams
from cloaknet.planner import Plan
from cloaknet.plans import SelectedPlan, select_plan
from cloaknet.protocol_table import selected_section
from cloaknet.protocols import SummationProtocol, make_protocol

__all__ = ["DEMO_PROTOCOLS", "Choice", "choose", "summary_rows"]

#: ``--protocol`` values: ``plan`` (default: what ``cloaknet plan`` selects), ``cloak`` (the
#: cloak with the seed lemmas, or ``--bound``), or a comparison protocol by name.
DEMO_PROTOCOLS = ("plan", "cloak", "blanket", "cheu", "bbgn")

#: The noise each comparison protocol run by name adds (the planned ones name theirs).
_NAMED_NOISE = {"blanket": "uniform-blanket", "cheu": "randomized-response"}


@dataclass(frozen=True)
class Choice:
    """The protocol a demo runs, the :class:`~cloaknet.plans.SelectedPlan` it came from
    (``None`` for blanket and cheu, run by name) and :attr:`summary`: the fields every demo
    output reports about it (:meth:`SelectedPlan.summary`: ``protocol``, ``bound``,
    ``lemma``, ``noise``, ``messages_per_user``, ``epsilon``, ``epsilon_exact``, ``delta``,
    …)."""

    protocol: SummationProtocol
    selected: SelectedPlan | None
    summary: dict[str, Any]

    @property
    def cloak_plan(self) -> Plan | None:
        """The cloak's plan when the choice is the cloak, else ``None``."""
        return self.selected.plan if self.selected is not None else None

    @property
    def cloak_params(self) -> CloakParams | None:
        """The cloak's exact parameters when the choice is the cloak, else ``None``."""
        made = self.cloak_plan
        return made.params if made is not None else None

    def chain_table(self, precision: int | None) -> CloakParams | dict[str, Any]:
        """What the chain file's ``[protocol]`` holds: the cloak's parameters, or the named
        table of a comparison protocol (which the chain re-plans to the same parameters)."""
        if self.cloak_params is not None:
            return self.cloak_params
        if self.selected is not None:
            return selected_section(self.selected)
        table: dict[str, Any] = {
            "name": self.protocol.name,
            "users": self.protocol.users,
            "epsilon": self.protocol.epsilon,
            "delta": self.protocol.delta,
        }
        if precision is not None:
            table["precision"] = precision
        return table


def choose(
    protocol: str,
    users: int,
    epsilon: float,
    delta: float,
    *,
    mode: str = "single-user",
    bound: str = "auto",
    precision: int | None = None,
) -> Choice:
    """The demo's protocol for ``users`` users and the target (``epsilon``, ``delta``).

    ``protocol`` is one of :data:`DEMO_PROTOCOLS`: ``plan`` runs
    ``select_plan(users, epsilon, delta, mode=mode, bound=bound, precision=precision)``
    (what ``cloaknet plan`` prints); ``cloak`` the same with ``bound`` ``optimized`` when
    ``auto`` is given, and it must come out as the cloak; ``bbgn`` split-and-mix with Pólya
    noise (``bound="bbgn"``, single-user); ``blanket`` and ``cheu`` the comparison protocols
    (single-user; ``bound`` does not apply).

    :raises ParameterError: unknown ``protocol``, or arguments the choice cannot take.
    :raises InfeasiblePlanError: no parameters meet the target.
    """
    if protocol not in DEMO_PROTOCOLS:
        raise ParameterError(
            f"unknown protocol {protocol!r}; choose one of {', '.join(DEMO_PROTOCOLS)}"
        )
    if protocol in _NAMED_NOISE:
        if bound != "auto":
            raise ParameterError(f"--bound applies to the planned protocols, not {protocol}")
        built = make_protocol(protocol, users, epsilon, delta, precision=precision)
        exact = Fraction(epsilon)
        summary = {
            "protocol": protocol,
            "mode": "single-user",
            "bound": protocol,
            "lemma": str(built.parameters().get("citation", protocol)),
            "noise": _NAMED_NOISE[protocol],
            "messages_per_user": built.message_count,
            "modulus": built.message_modulus,
            "precision": built.parameters().get("precision"),
            "epsilon": epsilon,
            "epsilon_exact": certified.decimal_up(exact),
            "delta": delta,
            "target_epsilon": epsilon,
            "target_delta": delta,
            "meets_target": True,
            "evaluated_at_users": users,
            "expected_rmse": built.predicted_rmse(),
        }
        return Choice(built, None, summary)
    if protocol == "bbgn":
        if bound not in ("auto", "bbgn"):
            raise ParameterError(f"--protocol bbgn uses the bbgn bound, not {bound}")
        selected = select_plan(users, epsilon, delta, bound="bbgn", precision=precision)
    else:
        wanted = "optimized" if protocol == "cloak" and bound == "auto" else bound
        selected = select_plan(
            users, epsilon, delta, mode=mode, bound=wanted, precision=precision
        )
        if protocol == "cloak" and selected.plan is None:
            raise ParameterError(
                "the bbgn bound in single-user mode is split-and-mix with Pólya noise, not "
                "the cloak: use --protocol bbgn (or plan), or --mode sum-preserving"
            )
    return Choice(selected.protocol(), selected, selected.summary())


def summary_rows(summary: dict[str, Any], *, modulus: bool = False) -> list[tuple[str, str]]:
    """The (quantity, value) rows both demos print about a run's plan and outcome: bound,
    noise, messages, (optionally the modulus,) (ε, δ) with ε rounded down for display, the
    true sum, the rounded sum when there is one, the estimate, its error and the expected
    RMSE. ``summary`` is a demo's JSON summary."""
    epsilon = certified.display_down(Fraction(summary["epsilon_exact"]))
    rows = [
        ("bound", f"{summary['bound']} ({summary['lemma']})"),
        ("noise", str(summary["noise"])),
        ("messages per user m", str(summary["messages_per_user"])),
    ]
    if modulus:
        rows.append(("modulus N", str(summary["modulus"])))
    rows += [
        ("(epsilon, delta)", f"({epsilon}, {summary['delta']:.3g})"),
        ("true sum", f"{summary['true_sum']:.6f}"),
    ]
    if summary["rounded_sum"] is not None:
        rows.append(("rounded sum  Σ⌊x·k⌋/k", f"{summary['rounded_sum']:.6f}"))
    rows += [
        ("estimate", f"{summary['estimate']:.6f}"),
        ("error (estimate − true)", f"{summary['error']:+.6f}"),
        ("expected RMSE", f"{summary['expected_rmse']:.4g}"),
    ]
    return rows
