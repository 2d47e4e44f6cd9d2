"""Phantora: hybrid GPU-cluster simulator for ML training."""

__version__ = "0.1.0"
