"""The declarations of sinks (a PostgreSQL table, :mod:`goka.connect.postgres`; Parquet files,
:mod:`goka.connect.parquet`): checked at once, so a bad name, mode, path or policy fails where
it is declared, not mid-stream."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from goka.codec import Codec
from goka.connect.columns import NAME
from goka.errors import ConfigurationError
from goka.group.edges import spelled

__all__ = ["Mode", "ParquetSink", "PostgresSink", "Sink", "partition_template"]

Mode = Literal["upsert", "append"]


@dataclass(frozen=True)
class PostgresSink:
    """A table topic materialised into a PostgreSQL table (see the module docstring).

    Args:
        topic: the table topic (a group table, or a stream with keys).
        codec: decodes the values.
        dsn: the libpq connection string (``host=... dbname=...``, or a URL).
        table: the target table (created at the first write if ``create``).
        mode: ``"upsert"`` (one row per key, deleted by a tombstone) or ``"append"`` (one row
            per record).
        mapper: ``mapper(key, value) -> dict`` of columns, or None to leave the record out
            (default: a dict value's or protobuf message's fields, or a ``value`` column).
        create: create the table and add columns for new fields; else the table must exist
            with every column.
        schema: the table's schema.
        name: the sink's name in the offsets table (default: the table's).
        offsets_table: where each partition's next offset is kept.
        on_error: ``"fail"`` (default), ``"skip"`` (logged and counted) or
            ``"dead-letter"`` (to ``dead_letter``, exactly once: :mod:`goka.connect.
            dead_letters`) for a record that cannot be decoded, mapped or stored.
        dead_letter: the dead-letter topic (as many partitions as the topic at least).

    Raises:
        ConfigurationError: an invalid name, mode, policy or mapper.
    """

    topic: str
    codec: Codec[Any]
    dsn: str
    table: str
    mode: Mode = "upsert"
    mapper: Callable[[str, Any], Mapping[str, Any] | None] | None = None
    create: bool = True
    schema: str = "public"
    name: str = ""
    offsets_table: str = "goka_sink_offsets"
    on_error: Literal["fail", "skip", "dead-letter"] = "fail"
    dead_letter: str | None = None

    def __post_init__(self) -> None:
        where = f"PostgreSQL sink of {self.topic!r}"
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"{where}: topic must be a non-empty str")
        if not isinstance(self.codec, Codec):
            raise ConfigurationError(f"{where}: codec must be a goka Codec, got {self.codec!r}")
        for what in ("table", "schema", "offsets_table"):
            if not NAME.match(getattr(self, what)):
                found = getattr(self, what)
                raise ConfigurationError(f"{where}: {what} must be a plain SQL name (letters, "
                                         f"digits, _; 63 at most), got {found!r}")  # fmt: skip
        if self.mode not in ("upsert", "append"):
            raise ConfigurationError(f"{where}: mode must be 'upsert' or 'append', "
                                     f"got {self.mode!r}")  # fmt: skip
        check_policy(where, self)
        if self.mapper is not None and not callable(self.mapper):
            raise ConfigurationError(f"{where}: mapper must be callable(key, value)")
        if not isinstance(self.dsn, str) or not self.dsn:
            raise ConfigurationError(f"{where}: dsn must be a libpq connection string")
        if not self.name:
            object.__setattr__(self, "name", self.table)

    @property
    def identity(self) -> tuple[Any, ...]:
        """What tells this sink's writers apart (a worker keeps one per identity)."""
        return ("postgres", self.dsn, self.schema, self.table, self.name, self.topic, self.mode)

    def describe(self) -> str:
        """Where the sink writes, for logs and the CLI."""
        return f"{self.schema}.{self.table}"


#: Meta columns of every Parquet row (a value's field may not use these names).
PARQUET_META = ("key", "goka_partition", "goka_offset", "goka_timestamp", "goka_deleted")


@dataclass(frozen=True)
class ParquetSink:
    """A topic (a stream, or a table's changes) archived into Parquet files under ``path`` (a
    directory or an fsspec URL: ``file://``, ``s3://``, ``gs://``, ``memory://``), exactly once
    (see :mod:`goka.connect.parquet`).

    Args:
        topic: the topic to archive.
        codec: decodes the values.
        path: the root directory or URL (one sink per root: its manifest lives there).
        partition_by: the directory of a record under the root: a template with strftime
            directives of the record's time (UTC) and ``{field}`` of the value's fields, e.g.
            ``"date=%Y-%m-%d/country={country}"``; or ``partition_by(key, value, timestamp_ms)
            -> str``; None: the root.
        mapper: ``mapper(key, value) -> dict`` of columns, or None to leave the record out
            (default: a dict value's or protobuf message's fields, or a ``value`` column).
        max_file_records: a file rolls after this many records.
        max_file_bytes: ... or after this many bytes of input (keys and values).
        max_file_ms: ... or when a record is this much later (record time) than the file's
            first (None: no time rolling).
        compression: Parquet compression codec.
        tombstones: ``"keep"`` (a row with ``goka_deleted`` true, no value columns) or
            ``"skip"``.
        name: the sink's name (default: the topic's).
        storage_options: fsspec options of the filesystem (credentials, endpoint).
        on_error: ``"fail"`` (default), ``"skip"`` (logged and counted) or
            ``"dead-letter"`` (to ``dead_letter``, exactly once: :mod:`goka.connect.
            dead_letters`) for a record that cannot be decoded, mapped or stored.
        dead_letter: the dead-letter topic (as many partitions as the topic at least).

    Raises:
        ConfigurationError: an invalid path, template, size or policy.
    """

    topic: str
    codec: Codec[Any]
    path: str
    partition_by: str | Callable[[str, Any, int], str] | None = None
    mapper: Callable[[str, Any], Mapping[str, Any] | None] | None = None
    max_file_records: int = 1_000_000
    max_file_bytes: int = 256 * 2**20
    max_file_ms: int | None = None
    compression: str = "zstd"
    tombstones: Literal["keep", "skip"] = "keep"
    name: str = ""
    storage_options: Mapping[str, Any] | None = None
    on_error: Literal["fail", "skip", "dead-letter"] = "fail"
    dead_letter: str | None = None

    def __post_init__(self) -> None:
        where = f"Parquet sink of {self.topic!r}"
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"{where}: topic must be a non-empty str")
        if not isinstance(self.codec, Codec):
            raise ConfigurationError(f"{where}: codec must be a goka Codec, got {self.codec!r}")
        if not isinstance(self.path, str) or not self.path.strip():
            raise ConfigurationError(f"{where}: path must be a directory or an fsspec URL")
        scheme = urlsplit(self.path).scheme
        if scheme and len(scheme) > 1:  # (one letter: a Windows drive)
            import fsspec

            if scheme not in fsspec.available_protocols():
                raise ConfigurationError(f"{where}: path {self.path!r}: fsspec knows no "
                                         f"protocol {scheme!r}")  # fmt: skip
        if isinstance(self.partition_by, str):
            partition_template(self.partition_by, where)
        elif self.partition_by is not None and not callable(self.partition_by):
            raise ConfigurationError(f"{where}: partition_by must be a template str or "
                                     "callable(key, value, timestamp_ms)")  # fmt: skip
        for what in ("max_file_records", "max_file_bytes"):
            found = getattr(self, what)
            if not isinstance(found, int) or found < 1:
                raise ConfigurationError(f"{where}: {what} must be a positive int, got {found!r}")
        if self.max_file_ms is not None and (not isinstance(self.max_file_ms, int)
                                             or self.max_file_ms < 1):  # fmt: skip
            raise ConfigurationError(f"{where}: max_file_ms must be a positive int or None, "
                                     f"got {self.max_file_ms!r}")  # fmt: skip
        if self.tombstones not in ("keep", "skip"):
            raise ConfigurationError(f"{where}: tombstones must be 'keep' or 'skip', "
                                     f"got {self.tombstones!r}")  # fmt: skip
        check_policy(where, self)
        if self.mapper is not None and not callable(self.mapper):
            raise ConfigurationError(f"{where}: mapper must be callable(key, value)")
        import pyarrow as pa

        if self.compression not in ("none", "snappy", "gzip", "brotli", "lz4", "zstd") or (
            self.compression != "none" and not pa.Codec.is_available(self.compression)
        ):
            raise ConfigurationError(
                f"{where}: compression {self.compression!r} is not one "
                "pyarrow writes (zstd, snappy, gzip, lz4, brotli, none)"
            )
        if not self.name:
            object.__setattr__(self, "name", self.topic)

    @property
    def identity(self) -> tuple[Any, ...]:
        """What tells this sink's writers apart (a worker keeps one per identity)."""
        options = json.dumps(self.storage_options or {}, sort_keys=True, default=repr)
        return ("parquet", self.path, self.name, self.topic, options)  # (nested options too)

    def describe(self) -> str:
        """Where the sink writes, for logs and the CLI."""
        return self.path


#: Any sink a sink job runs.
Sink = PostgresSink | ParquetSink


def check_policy(where: str, sink: Any) -> None:
    """Check a sink's ``on_error`` and ``dead_letter``.

    Raises:
        ConfigurationError: an unknown policy, or a dead-letter topic without the policy (or
            the other way round, or the sink's own topic).
    """
    object.__setattr__(sink, "on_error", spelled(sink.on_error, f"{where}: on_error"))
    if sink.on_error not in ("fail", "skip", "dead-letter"):
        raise ConfigurationError(f"{where}: on_error must be 'fail', 'skip' or 'dead-letter', "
                                 f"got {sink.on_error!r}")  # fmt: skip
    if (sink.on_error == "dead-letter") != bool(sink.dead_letter):
        raise ConfigurationError(f"{where}: on_error='dead-letter' and dead_letter=topic go "
                                 "together")  # fmt: skip
    if sink.dead_letter == sink.topic:
        raise ConfigurationError(f"{where}: the dead-letter topic is the topic itself")


def partition_template(template: str, where: str) -> list[tuple[str, str | None]]:
    """Check a ``partition_by`` template; return its pieces: ``(text, None)`` (strftime
    directives of the record's time) and ``("", field)`` (a value's field), in order.

    Raises:
        ConfigurationError: an empty, absolute or malformed template.
    """
    import string

    if not template or template.startswith("/") or ".." in template.split("/"):
        raise ConfigurationError(f"{where}: partition_by {template!r} must be a relative "
                                 "directory template")  # fmt: skip
    pieces: list[tuple[str, str | None]] = []
    try:
        for text, field_name, spec, conversion in string.Formatter().parse(template):
            if text:
                pieces.append((text, None))
            if field_name is None:
                continue
            if not field_name.isidentifier() or spec or conversion:
                raise ValueError(f"{{{field_name}}} is not a plain field name")
            pieces.append(("", field_name))
    except ValueError as exc:
        raise ConfigurationError(f"{where}: partition_by {template!r}: {exc}") from None
    return pieces
