"""Summation protocols in the shuffled model, behind one interface.

=========================  ================================================================
name                       protocol
=========================  ================================================================
``cloak-single-user``      the invisibility cloak, single-user changes (Ghazi, Pagh,
                           Velingker, arXiv 1906.08320; Lemma 11) — :mod:`.cloak`
``cloak-sum-preserving``   the invisibility cloak, sum-preserving changes (Lemma 6)
``blanket``                single message, privacy blanket (Balle, Bell, Gascón, Nissim,
                           arXiv 1903.02837) — :mod:`.blanket`
``cheu``                   unary randomized response (Cheu, Smith, Ullman, Zeber, Zhilyaev,
                           arXiv 1808.01394), constants calibrated here — :mod:`.cheu`
``central``                trusted curator + exact discrete Laplace (reference) — :mod:`.central`
``bbgn``                   split-and-mix with distributed discrete Laplace (Ishai et al. 2006;
                           Balle, Bell, Gascón, Nissim, arXiv 1909.11225) — :mod:`.bbgn`
=========================  ================================================================

:func:`make_protocol` builds one by name; each implements
:class:`~cloaknet.protocols.base.SummationProtocol`. The mathematics: ``docs/protocols.md``.
"""

from __future__ import annotations

from typing import Any

from cloaknet.errors import ParameterError
from cloaknet.protocols.base import SummationProtocol
from cloaknet.protocols.bbgn import BBGNPlan, BBGNProtocol, bbgn_messages, bbgn_plan
from cloaknet.protocols.blanket import BlanketProtocol
from cloaknet.protocols.central import CentralProtocol
from cloaknet.protocols.cheu import CheuProtocol
from cloaknet.protocols.cloak import CloakProtocol

__all__ = [
    "PROTOCOLS",
    "BBGNPlan",
    "BBGNProtocol",
    "BlanketProtocol",
    "CentralProtocol",
    "CheuProtocol",
    "CloakProtocol",
    "SummationProtocol",
    "bbgn_messages",
    "bbgn_plan",
    "make_protocol",
]

PROTOCOLS: tuple[str, ...] = (
    "cloak-single-user",
    "cloak-sum-preserving",
    "blanket",
    "cheu",
    "central",
    "bbgn",
)

_OPTIONS: dict[str, frozenset[str]] = {
    "cloak-single-user": frozenset(
        {"colluders", "precision", "bound", "max_users", "max_messages", "max_rmse"}
    ),
    "cloak-sum-preserving": frozenset(
        {"colluders", "precision", "bound", "max_users", "max_messages"}
    ),
    "blanket": frozenset({"precision"}),
    "cheu": frozenset({"precision", "bits_per_user"}),
    "central": frozenset({"precision"}),
    "bbgn": frozenset({"colluders", "precision", "tail", "max_users"}),
}


def make_protocol(
    name: str, users: int, epsilon: float, delta: float, **options: Any
) -> SummationProtocol:
    """Build the protocol ``name`` (one of :data:`PROTOCOLS`) for n = ``users`` and (ε, δ).

    ``options`` are protocol-specific (see each class); options that are ``None`` are
    ignored, so callers may pass a common set such as ``colluders=None``.

    :raises ParameterError: unknown name or option, or invalid parameters.
    :raises InfeasiblePlanError: the protocol cannot meet the target at this n.
    """
    if name not in _OPTIONS:
        raise ParameterError(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOLS)}")
    given = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(given) - _OPTIONS[name])
    if unknown:
        raise ParameterError(
            f"protocol {name!r} does not take option(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(_OPTIONS[name])) or 'none'}"
        )
    if name == "cloak-single-user":
        return CloakProtocol.planned(users, epsilon, delta, mode="single-user", **given)
    if name == "cloak-sum-preserving":
        return CloakProtocol.planned(users, epsilon, delta, mode="sum-preserving", **given)
    if name == "blanket":
        return BlanketProtocol(users, epsilon, delta, **given)
    if name == "cheu":
        return CheuProtocol(users, epsilon, delta, **given)
    if name == "central":
        return CentralProtocol(users, epsilon, delta, **given)
    return BBGNProtocol(users, epsilon, delta, **given)
