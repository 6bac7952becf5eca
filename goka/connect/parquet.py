"""A topic into Parquet files, exactly once.

Declare the sink (checked at once)::

    sink = ParquetSink("user-clicks", JsonCodec(), "s3://archive/clicks",
                       partition_by="date=%Y-%m-%d", max_file_ms=3_600_000)

and give a :class:`ParquetWriter` each partition's records in offset order. A write:

1. recovers the partition (see :mod:`goka.connect.manifest`) and leaves out records below its
   committed next offset (written already);
2. groups the records into files: by directory (``partition_by``), rolled after
   ``max_file_records`` records, ``max_file_bytes`` bytes of input or ``max_file_ms`` of
   record time; each file is named by the partition and its first and last offsets, so a
   rewrite of the same records gives the same file;
3. writes the files to the staging area, stores the partition's grown schema, commits a
   manifest entry (the files and the next offset: the commit point) and moves the files to
   their places.

Columns: ``key`` (text), ``goka_partition``, ``goka_offset``, ``goka_timestamp`` (UTC),
``goka_deleted`` (a tombstone: no value columns), then a dict value's fields (or a mapper's
columns, or one ``value`` column) with types from the values: bool, int64, float64 (ints
widen), string, binary, timestamp (UTC), date; lists and dicts are stored as JSON text. A
partition's columns only grow; a value of another type than its column follows ``on_error``
with the record's topic, partition, offset, key and the column.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goka.connect.manifest import Manifest
from goka.connect.rows import DeadLetterSender, Record, Row, WriteSummary, decode_rows
from goka.connect.sink import PARQUET_META, ParquetSink, partition_template
from goka.errors import SinkError
from goka.storage.urls import ensure_dir

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ParquetSink", "ParquetWriter"]

#: Python types of values -> the column kind they ask for (bool before int: a bool is an int).
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "bool"), (int, "int64"), (float, "double"), (str, "string"),
    ((bytes, bytearray, memoryview), "binary"), (dt.datetime, "timestamp[us, tz=UTC]"),
    (dt.date, "date32[day]"), ((dict, list, tuple), "json"),
)  # fmt: skip
#: What a column of each kind also takes.
_WIDENS = {"double": ("int64",), "json": ("bool", "int64", "double", "string")}
_INT64 = 2**63


def _kind(value: Any, name: str) -> str:
    for types, kind in _KINDS:
        if isinstance(value, types):
            if isinstance(value, int) and kind == "int64" and not -_INT64 <= value < _INT64:
                raise ValueError(f"column {name!r}: {value} does not fit a 64-bit integer")
            return kind
    raise ValueError(f"column {name!r}: no Parquet type for {type(value).__name__} values "
                     "(use a mapper)")  # fmt: skip


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    return {"bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(),
            "string": pa.string(), "binary": pa.binary(), "json": pa.string(),
            "timestamp[us, tz=UTC]": pa.timestamp("us", tz="UTC"),
            "date32[day]": pa.date32()}[kind]  # fmt: skip


@dataclass
class _File:
    """Rows of one file being gathered."""

    directory: str
    first: int
    first_time: int
    rows: list[Row] = field(default_factory=list)
    size: int = 0


class ParquetWriter:
    """Writes records of a :class:`ParquetSink` (see the module docstring). Keeps nothing
    between writes but the open filesystem: the manifest is read each time, so writers of a
    partition in several processes (a retried task) never disagree."""

    def __init__(self, sink: ParquetSink) -> None:
        self.sink = sink
        self.manifest = Manifest(sink.path, sink.storage_options, sink.name, sink.topic)
        self._template = (partition_template(sink.partition_by, "")
                          if isinstance(sink.partition_by, str) else None)  # fmt: skip
        self._times: dict[tuple[str, int], str] = {}

    def close(self) -> None:
        """Nothing to close (files are whole after each write)."""

    def __enter__(self) -> ParquetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def offsets(self) -> dict[int, int]:
        """Each partition's next offset to write, as the manifest says."""
        return self.manifest.offsets()

    def reset(self, partition: int | None = None) -> None:
        """Forget the commits (all partitions; the files stay: delete them to rewrite)."""
        if partition is not None:
            raise NotImplementedError("a Parquet sink resets all its partitions at once")
        self.manifest.reset()

    # -- writing ---------------------------------------------------------------------------------
    def write(self, partition: int, records: Sequence[Record], end: int, *,
              dead_letters: DeadLetterSender | None = None) -> WriteSummary:  # fmt: skip
        """Write ``records`` of ``partition`` (offset order) into files and commit them with
        ``end`` (the next offset). Records below the committed position are left out; refused
        ones (``on_error="dead-letter"``) go to ``dead_letters`` before the commit.

        Raises:
            SinkError: a record cannot be written under ``on_error="fail"``, or the root
                belongs to another sink: nothing of this write is committed.
        """
        started = time.monotonic()
        summary = WriteSummary()
        manifest = self.manifest
        manifest.claim()
        manifest.recover(partition)
        start = manifest.next_offset(partition)
        if end <= start:
            summary.already = len(records)
            return summary
        todo = [r for r in records if r[1] >= start]
        summary.already = len(records) - len(todo)
        known = manifest.schema(partition)
        kinds = {} if known is None else {f.name: _stored_kind(f) for f in known
                                          if f.name not in PARQUET_META}  # fmt: skip
        columns = dict(kinds)
        files = self._gather(partition, todo, columns, summary)
        if columns != kinds:
            summary.added_columns = [n for n in columns if n not in kinds]
            manifest.set_schema(partition, self._schema(columns))
        schema = self._schema(columns)
        written = [self._stage(partition, f, schema, columns) for f in files]
        if summary.dead_letters:
            if dead_letters is None:
                raise SinkError(f"Parquet sink {self.sink.name!r}: dead letters but nothing "
                                "to send them with")  # fmt: skip
            dead_letters(partition, summary.dead_letters)
        manifest.commit(partition, end, written)
        summary.files = len(written)
        for file in files:
            for row in file.rows:
                if row[3] is None:
                    summary.deleted += 1
                else:
                    summary.appended += 1
        summary.seconds = time.monotonic() - started
        return summary

    def _gather(self, partition: int, records: Sequence[Record], columns: dict[str, str],
                summary: WriteSummary) -> list[_File]:  # fmt: skip
        """The records' rows in files (``columns`` grows with new fields)."""
        sink = self.sink
        keep_tombstones = sink.tombstones == "keep"

        def check(key: str, offset: int, values: dict[str, Any] | None) -> None:
            for name, item in (values or {}).items():
                if item is None:
                    continue
                kind = _kind(item, name)
                have = columns.get(name)
                if have is None:
                    columns[name] = kind
                elif have != kind and kind not in _WIDENS.get(have, ()):
                    raise ValueError(f"key {key!r}: column {name!r} ({have}) takes no {kind} "
                                     f"value ({item!r:.60})")  # fmt: skip

        what = f"Parquet sink {sink.name!r}"
        files: list[_File] = []
        open_files: dict[str, _File] = {}
        for row, record in decode_rows(sink, what, partition, records, summary, PARQUET_META,
                                       check):  # fmt: skip
            if row[3] is None and not keep_tombstones:
                continue
            directory = self._directory(row, record, what, partition)
            size = len(record[2] or b"") + len(record[3] or b"")
            current = open_files.get(directory)
            span = sink.max_file_ms
            if current is not None and (
                len(current.rows) >= sink.max_file_records
                or current.size + size > sink.max_file_bytes
                or (span is not None and row[2] - current.first_time >= span)
            ):  # fmt: skip
                current = None
            if current is None:
                current = open_files[directory] = _File(directory, row[0], row[2])
                files.append(current)
            current.rows.append(row)
            current.size += size
        return files

    def _directory(self, row: Row, record: Record, what: str, partition: int) -> str:
        """The directory of ``row`` under the root ('' : the root)."""
        sink = self.sink
        if sink.partition_by is None:
            return ""
        offset, key, timestamp, values = row
        try:
            if self._template is None:
                value = None if record[3] is None else sink.codec.decode(record[3])
                assert callable(sink.partition_by)
                found = sink.partition_by(key, value, timestamp)
                if not isinstance(found, str):
                    raise TypeError(f"partition_by returned {found!r}, not a str")
            else:
                found = self._render(timestamp, values)
        except Exception as exc:
            from goka.errors import SinkError

            raise SinkError(
                f"{what}: topic {record[0]!r} partition {partition} offset "
                f"{offset}: partition_by: {type(exc).__name__}: {exc}"
            ) from exc
        parts = [p for p in found.replace("\\", "/").split("/") if p not in ("", ".", "..")]
        return "/".join(parts)

    def _render(self, timestamp: int, values: dict[str, Any] | None) -> str:
        assert self._template is not None
        out = []
        for text, name in self._template:
            if name is None:
                if "%" in text:
                    text = self._strftime(text, timestamp)
                out.append(text)
            else:
                found = None if values is None else values.get(name)
                out.append("__null__" if found is None or found == "" else
                           str(found).replace("/", "_").replace("\x00", "_"))  # fmt: skip
        return "".join(out)

    def _strftime(self, text: str, timestamp: int) -> str:
        second = timestamp // 1000
        key = (text, second)
        found = self._times.get(key)
        if found is None:
            if len(self._times) > 4096:
                self._times.clear()
            at = dt.datetime.fromtimestamp(max(second, 0), dt.UTC)
            found = self._times[key] = at.strftime(text)
        return found

    def _schema(self, columns: dict[str, str]) -> pa.Schema:
        import pyarrow as pa

        meta = [("key", pa.string()), ("goka_partition", pa.int32()),
                ("goka_offset", pa.int64()), ("goka_timestamp", pa.timestamp("ms", tz="UTC")),
                ("goka_deleted", pa.bool_())]  # fmt: skip
        fields = [pa.field(n, _arrow_type(k), metadata={"goka": k}) for n, k in columns.items()]
        return pa.schema([pa.field(n, t) for n, t in meta] + fields)

    def _stage(self, partition: int, file: _File, schema: pa.Schema,
               columns: dict[str, str]) -> dict[str, Any]:  # fmt: skip
        """Write ``file`` to the staging area; return its manifest item."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = file.rows
        data: dict[str, list[Any]] = {
            "key": [r[1] for r in rows], "goka_partition": [partition] * len(rows),
            "goka_offset": [r[0] for r in rows],
            "goka_timestamp": [r[2] if r[2] >= 0 else None for r in rows],
            "goka_deleted": [r[3] is None for r in rows],
        }  # fmt: skip
        for name, kind in columns.items():
            found = [None if r[3] is None else r[3].get(name) for r in rows]
            if kind == "json":
                found = [v if v is None else json.dumps(v, default=str) for v in found]
            elif kind == "double":
                found = [v if v is None else float(v) for v in found]
            data[name] = found
        table = pa.table(data, schema=schema)
        name = f"part-{partition:05d}-{file.first:020d}-{rows[-1][0]:020d}.parquet"
        staged = self.manifest.staged(name)
        ensure_dir(self.manifest.fs, staged.rsplit("/", 1)[0])
        with self.manifest.fs.open(staged, "wb") as out:
            pq.write_table(table, out, compression=self.sink.compression)
        place = f"{file.directory}/{name}" if file.directory else name
        return {"path": place, "rows": len(rows), "first": file.first, "last": rows[-1][0]}


def _stored_kind(column: pa.Field) -> str:
    """The kind a stored column was written as."""
    metadata = column.metadata or {}
    return str(metadata.get(b"goka", str(column.type).encode()).decode())
