"""Experiments that produce numbers for papers: CSV files, PNG plots and a ``report.md``.

``cloaknet experiment collusion`` exercises the colluding-user lemmas with an exact adversary
(:mod:`cloaknet.experiments.collusion`).
"""
