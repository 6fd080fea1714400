"""Connectors: other ways in. Each reads a source and publishes through
:class:`relay.publishing.Publisher`, exactly as ``POST /v1/events`` does.

``outbox``: a PostgreSQL table a backend inserts into inside its own transaction.
"""
