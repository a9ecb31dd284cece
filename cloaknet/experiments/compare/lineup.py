"""The rows of the compare experiment: which protocol each row runs, with which bound and noise.

Two kinds of row (:data:`ROWS`, in report order):

``default-single-user``, ``default-sum-preserving`` (:data:`DEFAULT_ROWS`)
    The default plan: exactly what ``cloaknet plan --mode <mode>`` prints for (n, ε, δ), i.e.
    :func:`cloaknet.plans.select_plan` with ``mode`` and every other argument at its default
    (bound ``auto``: whichever of the seed lemmas (optimized) and the BBGN bound needs fewer
    messages per user), run by :meth:`~cloaknet.plans.SelectedPlan.protocol`. The row reports
    the plan's own ``bound`` and ``noise``; what it runs may be the cloak or split-and-mix
    (single-user mode with the BBGN bound), which the ``runs`` column says.
the named protocols of :data:`cloaknet.protocols.PROTOCOLS`
    Built by :func:`cloaknet.protocols.make_protocol` with its defaults, whatever
    ``cloaknet plan`` would select: the two cloak rows therefore use the seed lemmas with the
    optimized search (bound ``optimized``) at every n.

Every feasible cell names its bound and its noise (:func:`bound_and_noise`). For the
protocols without a bound choice (blanket, cheu, central) the ``bound`` is the protocol's own
analysis, named like the protocol, as ``cloaknet demo`` names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cloaknet.params import Mode
from cloaknet.plans import SelectedPlan, select_plan
from cloaknet.protocols import (
    PROTOCOLS,
    BBGNProtocol,
    CloakProtocol,
    SummationProtocol,
    make_protocol,
)

__all__ = [
    "BOUND_LABELS",
    "DEFAULT_ROWS",
    "NAMED_NOISE",
    "ROWS",
    "Built",
    "bound_and_noise",
    "bound_label",
    "build",
    "build_protocol",
    "caption",
]

#: The default-plan rows and the neighbouring notion each plans for.
DEFAULT_ROWS: Final[dict[str, Mode]] = {
    "default-single-user": "single-user",
    "default-sum-preserving": "sum-preserving",
}
#: Every row the experiment can run, in report order: the default plans first, then the
#: named protocols.
ROWS: Final[tuple[str, ...]] = (*DEFAULT_ROWS, *PROTOCOLS)

#: The noise of the protocols run by name that have no bound choice (the names
#: ``cloaknet demo`` reports; central's is the exact discrete Laplace).
NAMED_NOISE: Final[dict[str, str]] = {
    "blanket": "uniform-blanket",
    "cheu": "randomized-response",
    "central": "discrete-laplace",
}

#: How the report names each ``bound`` value (the cloak's three as ``cloaknet plan`` does).
BOUND_LABELS: Final[dict[str, str]] = {
    "optimized": "seed lemmas (optimized)",
    "theorem": "paper's theorem constants",
    "bbgn": "BBGN bound",
    "blanket": "privacy-blanket bound",
    "cheu": "calibrated binomial tails",
    "central": "discrete Laplace mechanism",
}


@dataclass(frozen=True)
class Built:
    """One row's protocol instance at one (n, ε, δ): the protocol, the ``bound`` and
    ``noise`` it uses (machine names, as in ``compare.csv``) and, for a default row, the
    :class:`~cloaknet.plans.SelectedPlan` it came from (None for a named protocol)."""

    protocol: SummationProtocol
    bound: str
    noise: str
    selected: SelectedPlan | None = None


def bound_and_noise(protocol: SummationProtocol) -> tuple[str, str]:
    """(bound, noise) of a protocol instance: the cloak's plan bound (``"explicit"`` without
    a plan) and ``"truncated-laplace"`` or ``"none"`` (the same rule as
    :class:`cloaknet.plans.SelectedPlan`); ``("bbgn", "polya")`` for split-and-mix; the
    protocol's name and :data:`NAMED_NOISE` for blanket, cheu and central.

    :raises KeyError: a protocol this experiment does not know.
    """
    if isinstance(protocol, CloakProtocol):
        bound = protocol.plan.bound if protocol.plan is not None else "explicit"
        return bound, "truncated-laplace" if protocol.params.noise is not None else "none"
    if isinstance(protocol, BBGNProtocol):
        return "bbgn", "polya"
    return protocol.name, NAMED_NOISE[protocol.name]


def build(name: str, users: int, epsilon: float, delta: float) -> Built:
    """The protocol of row ``name`` (one of :data:`ROWS`) for n = ``users`` and (ε, δ):
    ``select_plan(users, epsilon, delta, mode=…).protocol()`` for a default row, with the
    plan's ``bound`` and ``noise``; ``make_protocol(name, users, epsilon, delta)`` otherwise,
    with :func:`bound_and_noise`. Deterministic: the same arguments give the same parameters
    (the worker processes rebuild each cell's protocol with it).

    :raises ParameterError: unknown row or invalid parameters.
    :raises InfeasiblePlanError: no parameters meet the target at this n.
    """
    mode = DEFAULT_ROWS.get(name)
    if mode is not None:
        selected = select_plan(users, epsilon, delta, mode=mode)
        return Built(selected.protocol(), selected.bound, selected.noise, selected)
    protocol = make_protocol(name, users, epsilon, delta)
    bound, noise = bound_and_noise(protocol)
    return Built(protocol, bound, noise)


def build_protocol(name: str, users: int, epsilon: float, delta: float) -> SummationProtocol:
    """``build(name, users, epsilon, delta).protocol`` (same errors)."""
    return build(name, users, epsilon, delta).protocol


def bound_label(bound: str) -> str:
    """The report's name of a ``bound`` value (:data:`BOUND_LABELS`; unknown values as
    given)."""
    return BOUND_LABELS.get(bound, bound)


def _distinct(values: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def caption(name: str, cells: Iterable[tuple[str, str, str]], *, chooser: bool = True) -> str:
    """What row ``name`` runs, for labels and legends, from its feasible cells' (runs,
    bound, noise) triples: "<bound label>; noise: <noise>", prefixed "cloaknet plan's
    choice: " for a default row (unless ``chooser`` is false) and followed by
    "; runs <protocol>" when the row runs a protocol of another name. Values that differ
    between cells are joined with " / " in order of first appearance. Without feasible
    cells: "no feasible cell".
    """
    triples = list(cells)
    if not triples:
        return "no feasible cell"
    bounds = " / ".join(bound_label(b) for b in _distinct(t[1] for t in triples))
    noises = " / ".join(_distinct(t[2] for t in triples))
    runs = [r for r in _distinct(t[0] for t in triples) if r != name]
    text = f"{bounds}; noise: {noises}"
    if chooser and name in DEFAULT_ROWS:
        text = "cloaknet plan's choice: " + text
    if runs:
        text += f"; runs {' / '.join(runs)}"
    return text
