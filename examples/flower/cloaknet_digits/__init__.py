"""The cloaknet + Flower example: FedAvg on scikit-learn's digits (``docs/flower.md``)."""
