"""Experiments that produce numbers for papers: CSV files, PNG plots and a ``report.md``.

* ``cloaknet experiment compare`` (:mod:`cloaknet.experiments.compare`) measures Figure 1 of
  the paper: communication and error of every summation protocol on a grid of n and ε.
* ``cloaknet experiment collusion`` (:mod:`cloaknet.experiments.collusion`) exercises the
  colluding-user lemmas with an exact adversary (:mod:`cloaknet.adversary`).

Shared by both: :mod:`.parallel` (trials in worker processes), :mod:`.samplers` (exact
samplers), :mod:`.stats` (intervals and quantiles on scipy/numpy, and the interval
judgements the reports make), :mod:`.output` (the CSV/JSON/PNG edge, where typed rows become
dicts), :mod:`.plotting` (offsets, zero counts as upper bounds, legends outside the data) and
:mod:`.text` (Markdown formatting).
"""
