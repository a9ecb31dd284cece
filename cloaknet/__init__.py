"""cloaknet: differentially private summation in the shuffled model (the invisibility cloak)."""
