"""The benchmark suite: ``make bench`` runs ``bench/run.py``."""
