"""relay: webhook delivery on Redis."""

__version__ = "0.1.0"
