"""``cloaknet experiment compare``: Figure 1 of Ghazi, Pagh and Velingker (2019), measured.

Figure 1 of the paper compares summation protocols in the shuffled model by asymptotic
formulas: messages per user, message size and expected error, for Cheu et al., Balle et al.
(the privacy blanket) and the invisibility cloak. This experiment builds every protocol of
:data:`cloaknet.protocols.PROTOCOLS` (those three plus the trusted-curator reference and the
split-and-mix protocol of Balle, Bell, Gascón and Nissim) on a grid of n and ε at one δ,
runs ``trials`` rounds of each, and reports the measured communication and error next to
the paper's formulas and the protocols' own predictions.

Rows (:mod:`.lineup`)
    Two *default* rows, ``default-single-user`` and ``default-sum-preserving``, run exactly
    what ``cloaknet plan`` selects for each (n, ε, δ) in each mode
    (``select_plan(n, ε, δ, mode=…).protocol()``, bound ``auto``; at the default grid the BBGN
    bound: split-and-mix with Pólya noise in single-user mode, the cloak's encoder in
    sum-preserving mode). The named rows are built by :func:`cloaknet.protocols.make_protocol`;
    the two cloak rows thus use the seed lemmas with the optimized search (bound
    ``optimized``). Every feasible cell records the protocol it ``runs``, its ``bound``, its
    ``noise`` and its message ``modulus``, and the report and plots label every row with its
    bound and noise.

Input data
    For each n one input vector x ∈ [0, 1)^n is drawn once from numpy's PCG64 seeded with
    (``seed`` or 0, n) (:mod:`.data`). This is *data*, not protocol randomness: every
    protocol and every ε sees the same x at a given n, so the rows are comparable, and the
    error of a round is ``estimate − Σ x`` (Σ x summed exactly with :func:`math.fsum`).

Protocol randomness
    Every trial draws from its own :class:`~cloaknet.randomness.RandomSource`: the OS CSPRNG
    when ``seed`` is None, else a :class:`~cloaknet.randomness.DeterministicRandom` keyed by
    (seed, row, n, ε, δ, trial index), so a seeded run is replayable bit for bit and
    does not depend on ``jobs`` or on how trials are split between processes. numpy's
    generators are never used for protocol randomness.

Two simulation methods (the ``method`` column; :mod:`.simulate`)
    ``messages`` runs the real protocol (encode → shuffle → analyze) whenever
    n·m <= ``max_messages_per_trial`` (default 2·10^6, which keeps the default grid at a few
    minutes on two cores), and always for the protocols without a sufficient-statistic
    sampler (blanket, central: one message per user). ``sufficient-statistic`` draws the
    exact distribution of the one sum each analyzer depends on (:mod:`.sufficient`).

Statistics per (row, n, ε) (:mod:`.summary`, :mod:`cloaknet.experiments.stats`)
    measured RMSE = sqrt(mean of error²) over the trials; its 95% interval is a χ² interval
    with kurtosis-adjusted degrees of freedom (:func:`~cloaknet.experiments.stats.rmse_interval`):
    exact for Gaussian errors, approximate otherwise (a deterministic error, as the
    sum-preserving cloak's, gets the point interval). ``predicted_rmse`` is
    :meth:`SummationProtocol.predicted_rmse_for` on the fixed x (exact for blanket, cheu,
    central and bbgn; for the cloak the bias is exact and the noise variance exact, clamping
    ignored); ``predicted_rmse_generic`` is :meth:`SummationProtocol.predicted_rmse`: an upper
    bound over all inputs for the others, but the planner's model (uniform fractional parts)
    for the cloak.

Outputs in ``out`` (:mod:`.run`): ``compare.csv`` (one line per (row, n, ε) cell),
``trials.csv`` (one line per round), ``error_vs_users.png``, ``communication_vs_users.png``
(:mod:`.plots`), ``settings.json`` and ``report.md`` (:mod:`.report`, :mod:`.findings`).
"""

from __future__ import annotations

from cloaknet.experiments.compare.data import input_vector, trial_rng
from cloaknet.experiments.compare.rows import ROW_COLUMNS, TRIAL_COLUMNS, CellRow, Method, TrialRow
from cloaknet.experiments.compare.run import run_compare_experiment
from cloaknet.experiments.compare.settings import DEFAULT_MESSAGE_LIMIT, CompareSettings
from cloaknet.experiments.compare.simulate import choose_method, simulate_trial
from cloaknet.experiments.compare.sufficient import FAST_PATH_PROTOCOLS

__all__ = [
    "DEFAULT_MESSAGE_LIMIT",
    "FAST_PATH_PROTOCOLS",
    "ROW_COLUMNS",
    "TRIAL_COLUMNS",
    "CellRow",
    "CompareSettings",
    "Method",
    "TrialRow",
    "choose_method",
    "input_vector",
    "run_compare_experiment",
    "simulate_trial",
    "trial_rng",
]
