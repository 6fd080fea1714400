"""The history archive: finished deliveries and their events in PostgreSQL.

With ``RELAY_ARCHIVE_URL`` set, Redis keeps what is moving (live deliveries, the last
``RELAY_HOT_RETENTION`` of finished ones, idempotency records, lanes, endpoints) and
PostgreSQL keeps what happened. :mod:`relay.archive.schema` creates and migrates the
tables, :mod:`relay.archive.tables` reads and writes them, :mod:`relay.archive.mover`
moves finished deliveries (run by every worker), and :mod:`relay.archive.history`
answers reads from either tier as one.
"""
