"""Connectors: tables and streams out of Kafka into databases and files, exactly once.

* :class:`~goka.connect.postgres.PostgresSink`: a table topic (a group table, or any keyed
  stream) materialised into a PostgreSQL table (upserts and deletes, or one row per record),
  with each partition's position stored in the same transaction as its rows.
* :class:`~goka.connect.parquet.ParquetSink`: a topic archived into Parquet files (a directory
  or an fsspec URL), partitioned by time or fields, with a manifest of committed files.
* :class:`~goka.connect.files.FileSource`: JSON lines, CSV or Parquet files (a directory or
  a bucket; the files there, or also those that arrive) into a topic, each record carrying
  its position so a restart resumes after the last one written.

Every connector either keeps its progress in the same transaction as its data or writes
idempotently, so a crash at any moment neither loses nor duplicates a record.
"""

from goka.connect.files import FileSource, FileSourceJob, SourceTotals
from goka.connect.manifest import committed_files, read_table
from goka.connect.parquet import ParquetWriter
from goka.connect.positions import SourceError
from goka.connect.postgres import PostgresWriter
from goka.connect.sink import ParquetSink, PostgresSink
from goka.errors import SinkError

__all__ = ["FileSource", "FileSourceJob", "ParquetSink", "ParquetWriter", "PostgresSink",
           "PostgresWriter", "SinkError", "SourceError", "SourceTotals", "committed_files",
           "read_table"]  # fmt: skip
