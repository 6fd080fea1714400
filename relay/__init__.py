"""relay: webhook delivery on Redis."""

__version__ = "0.9.0"  # semantic versioning: see CHANGELOG.md
