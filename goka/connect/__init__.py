"""Connectors: tables and streams out of Kafka into databases and files, exactly once.

* :class:`~goka.connect.postgres.PostgresSink`: a table topic (a group table, or any keyed
  stream) materialised into a PostgreSQL table (upserts and deletes, or one row per record),
  with each partition's position stored in the same transaction as its rows.
* :class:`~goka.connect.parquet.ParquetSink`: a topic archived into Parquet files (a directory
  or an fsspec URL), partitioned by time or fields, with a manifest of committed files.
* :class:`~goka.connect.files.FileSource`: JSON lines, CSV or Parquet files (a directory or
  a bucket; the files there, or also those that arrive) into a topic.
* :class:`~goka.connect.postgres_source.PostgresSource`: rows of a PostgreSQL table or query
  by an incrementing and/or timestamp column into a topic.
* :class:`~goka.connect.postgres_cdc.PostgresCdcSource`: the inserts, updates and deletes of
  PostgreSQL tables into topics, through logical decoding.

Sources carry each record's position in a header, so a restart resumes after the last one
written to each partition.

Every connector either keeps its progress in the same transaction as its data or writes
idempotently, so a crash at any moment neither loses nor duplicates a record.
"""

from goka.connect.files import FileSource, FileSourceJob
from goka.connect.jobs import source_job
from goka.connect.manifest import committed_files, read_table
from goka.connect.parquet import ParquetWriter
from goka.connect.postgres import PostgresWriter
from goka.connect.postgres_cdc import PostgresCdcSource, PostgresCdcSourceJob
from goka.connect.postgres_source import PostgresSource, PostgresSourceJob
from goka.connect.sink import ParquetSink, PostgresSink
from goka.connect.source import SourceTotals
from goka.errors import SinkError, SourceError

__all__ = ["FileSource", "FileSourceJob", "ParquetSink", "ParquetWriter", "PostgresCdcSource",
           "PostgresCdcSourceJob", "PostgresSink", "PostgresSource", "PostgresSourceJob",
           "PostgresWriter", "SinkError", "SourceError", "SourceTotals", "committed_files",
           "read_table", "source_job"]  # fmt: skip
