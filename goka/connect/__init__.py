"""Connectors: tables and streams out of Kafka into databases and files, exactly once.

* :class:`~goka.connect.postgres.PostgresSink`: a table topic (a group table, or any keyed
  stream) materialised into a PostgreSQL table (upserts and deletes, or one row per record),
  with each partition's position stored in the same transaction as its rows.

Every connector either keeps its progress in the same transaction as its data or writes
idempotently, so a crash at any moment neither loses nor duplicates a record.
"""

from goka.connect.postgres import PostgresSink, PostgresWriter, SinkError

__all__ = ["PostgresSink", "PostgresWriter", "SinkError"]
