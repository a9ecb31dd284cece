"""``cloaknet experiment collusion``: the resilience lemmas against an exact adversary.

The analyzer colludes with some users, who reveal their inputs and messages. The adversary
removes the colluders' messages from the shuffled view and runs exact Bayesian inference on
what remains (:mod:`cloaknet.adversary`): the two-honest-user case the lemmas reduce to — the
target and one other honest user; every further honest user is handed to the adversary too
(a stronger adversary than the lemmas', so the empirical losses are upper estimates). In
single-user mode the partner is a noisy honest user whenever one exists, as in the proof of
Lemma 11, and the adversary is told who added noise (not how much).

Sweeps (``--quick`` shrinks every grid and trial count):

* **messages** — privacy loss vs m = 1 … 20 in both modes (m ≤ 3: the adversary should win);
* **colluders** — n = 100 users, |C| from 0 to 99 (beyond Lemma 13's 0.9·n), single-user and
  sum-preserving, against Lemma 13;
* **smoothness** — how often two users' 2m shares are not γ-smooth or not distinct, against
  Lemma 1's η;
* **profile** — the empirical P[loss > ε] against the (ε, δ) of Lemma 5 (sum-preserving swap)
  and Lemma 11 (single-user);
* **behaviours** — honest-but-revealing and deviating colluders (all-zero shares, reused
  shares, shares colliding with honest ones);
* **networked** — views captured from a real in-process chain (sockets, onions, sqlite,
  the analyzer's ``dump_dir``), next to simulated views with the same parameters.

Outputs in ``--out``: ``trials.csv`` (one row per trial) and one CSV per table, PNG plots,
and ``report.md``.

Modules: :mod:`.settings` (the grid), :mod:`.simulate` (simulated, attacked rounds),
:mod:`.networked` (the networked chain), :mod:`.rows` (typed rows), :mod:`.bounds` (the
lemmas' (ε, δ), the share of rounds without noise, the noise ceiling), :mod:`.tables`
(summary statistics), :mod:`.guessing` (the adversary's accuracy against the prior and the
no-noise baseline), :mod:`.headlines`, :mod:`.plots`, :mod:`.report`, :mod:`.run`.
"""

from __future__ import annotations

from cloaknet.experiments.collusion.run import run_collusion_experiment
from cloaknet.experiments.collusion.settings import CollusionSettings

__all__ = ["CollusionSettings", "run_collusion_experiment"]
