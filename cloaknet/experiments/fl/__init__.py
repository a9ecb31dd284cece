"""``cloaknet experiment fl``: FedAvg on scikit-learn's digits with cloaknet's vector sums,
compared with non-private and central DP-FedAvg at the same (ε, δ) over the whole training."""

from cloaknet.experiments.fl.run import run_fl_experiment
from cloaknet.experiments.fl.settings import FLSettings

__all__ = ["FLSettings", "run_fl_experiment"]
