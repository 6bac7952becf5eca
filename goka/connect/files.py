"""Files into a topic, exactly once: JSON lines, CSV or Parquet files in a directory or bucket
(a path or an fsspec URL), the files there now (bounded) or also those that arrive (watch).

Declare the source (checked at once)::

    source = FileSource("/data/incoming", "orders", JsonCodec(), key="order_id", watch=True)

and run it (``goka connect run mysources:source``, or :class:`FileSourceJob`). Files are read
in the order of their modification time (then path), each record by record; ``transform``
may map, filter (None) or flat-map (a list) each record. Each record produced carries its
position (file, row, index among the transform's outputs) in a header
(:mod:`goka.connect.positions`); a restart reads the last record of each partition and
produces only what lies beyond it, so a crash at any moment neither loses nor duplicates a
record. What this asks of the files: each is whole when it appears under a matching name
(written elsewhere, then moved; in watch mode files younger than ``settle`` seconds wait),
and is not changed after; files arrive in increasing modification time (a file older than one
already read is not read: touch it). The source is the only writer of its topic's partitions.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import logging
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from goka.codec import Codec, JsonCodec
from goka.connect.positions import POSITION_HEADER
from goka.connect.source import (
    SourceTotals,
    SourceWriter,
    Unreadable,
    check_number,
    check_options,
)
from goka.connect.source_job import SourceJob
from goka.errors import ConfigurationError

__all__ = ["FileSource", "FileSourceJob", "SourceTotals"]

log = logging.getLogger(__name__)

Format = Literal["jsonl", "csv", "parquet"]
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv",
             ".parquet": "parquet", ".pq": "parquet"}  # fmt: skip
#: A file's place in the reading order, and a record's: (mtime ns, path, row, index).
Position = tuple[int, str, int, int]


@dataclass(frozen=True)
class FileSource:
    """Files under ``path`` into ``topic`` (see the module docstring).

    Args:
        path: a directory or an fsspec URL (``s3://bucket/incoming``).
        topic: the topic to write (its partitions are the source's alone).
        codec: encodes each record (a dict for JSON lines and Parquet, a dict of str for CSV).
        format: ``"jsonl"``, ``"csv"`` or ``"parquet"`` (default: from each file's suffix).
        pattern: which file names to read (a glob).
        key: the record's key: a field name, or ``key(record) -> str``; None: no key (records
            spread over partitions by their position).
        timestamp: the record's time: a field (ms since the epoch, or an ISO 8601 string), or
            ``timestamp(record) -> ms``; None: when it is produced.
        transform: ``transform(record)`` -> a record, None (filtered out) or a list (each
            produced), before the key and the codec.
        watch: keep reading files as they arrive (else: the files there now, then stop).
        poll_interval: seconds between looks for new files when watching.
        settle: seconds a file must be unchanged before it is read when watching.
        on_error: a record that cannot be parsed, transformed, keyed or encoded: ``"fail"``
            (stop, naming the file and row), ``"skip"`` (logged and counted) or
            ``"dead-letter"`` (to ``dead_letter``, with the reason in header ``goka-error``).
        dead_letter: the dead-letter topic (``on_error="dead-letter"``).
        name: the source's name (in each record's position header; default: the topic's).
        csv_options: :class:`csv.DictReader` options (``delimiter``...).
        storage_options: fsspec options of the filesystem.

    Raises:
        ConfigurationError: an invalid path, format, key, policy or interval.
    """

    path: str
    topic: str
    codec: Codec[Any] = field(default_factory=JsonCodec)
    format: Format | None = None
    pattern: str = "*"
    key: str | Callable[[Any], str] | None = None
    timestamp: str | Callable[[Any], int] | None = None
    transform: Callable[[Any], Any] | None = None
    watch: bool = False
    poll_interval: float = 1.0
    settle: float = 1.0
    on_error: Literal["fail", "skip", "dead-letter"] = "fail"
    dead_letter: str | None = None
    name: str = ""
    csv_options: Mapping[str, Any] | None = None
    storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        where = f"file source of {self.path!r}"
        if not isinstance(self.path, str) or not self.path.strip():
            raise ConfigurationError(f"{where}: path must be a directory or an fsspec URL")
        scheme = urlsplit(self.path).scheme
        if scheme and len(scheme) > 1:
            import fsspec

            if scheme not in fsspec.available_protocols():
                raise ConfigurationError(f"{where}: fsspec knows no protocol {scheme!r}")
        if self.format not in (None, "jsonl", "csv", "parquet"):
            raise ConfigurationError(f"{where}: format must be 'jsonl', 'csv' or 'parquet', "
                                     f"got {self.format!r}")  # fmt: skip
        check_number(where, self, "poll_interval")
        check_number(where, self, "settle")
        check_options(where, self, [self.topic])

    def describe(self) -> str:
        return self.path

    def format_of(self, path: str) -> Format | None:
        """The format of the file at ``path`` (None: not one the source reads)."""
        if self.format is not None:
            return self.format
        suffix = posixpath.splitext(path)[1].lower()
        found = _SUFFIXES.get(suffix)
        return found  # type: ignore[return-value]


class FileSourceJob(SourceJob[Position]):
    """Runs a :class:`FileSource` in this process (one idempotent producer: each partition
    in order, the source its only writer).

    Args:
        source: what to read and where to write.
        brokers: bootstrap servers.
        kafka_config: librdkafka settings of the producer and of the resume's reads.
    """

    def __init__(self, source: FileSource, brokers: str, *,
                 kafka_config: dict[str, Any] | None = None) -> None:  # fmt: skip
        if not isinstance(source, FileSource):
            raise ConfigurationError(f"source must be a FileSource, got {source!r}")
        from goka.storage.urls import check_location, filesystem

        super().__init__(source, brokers, kafka_config=kafka_config)
        check_location(source.path, source.storage_options, what=f"file source {source.name!r}")
        self.fs, root = filesystem(source.path, source.storage_options)
        self.root = root.rstrip("/") or "/"
        self._late: set[tuple[int, str]] = set()
        self._done: set[tuple[int, str]] = set()

    def parse(self, text: str) -> Position:
        mtime, row, index, path = text.split("\t", 3)
        return (int(mtime), path, int(row), int(index))

    def header(self, position: Position) -> str:
        return f"{position[0]}\t{position[2]}\t{position[3]}\t{position[1]}"

    def where(self, position: tuple[Any, ...]) -> str:
        return f"file {position[1]!r} row {position[2]}" + (
            f" output {position[3]}" if len(position) > 3 and position[3] else "")  # fmt: skip

    def read(self, writer: SourceWriter[Position], floor: Position | None, first: bool,
             watch: bool) -> None:  # fmt: skip
        # Every partition's last record comes from the floor's file or a later one: the files
        # before it are done (a partition never written: every file is read again, checked).
        for file in self._new_files(floor, None if first else writer.last, watch):
            self._read_file(file, writer)
            self._done.add(file)
            if self.stopping:
                break

    def _new_files(self, floor: Position | None, last: Position | None,
                   settle: bool) -> list[tuple[int, str]]:  # fmt: skip
        """The files to read, in order, as ``(mtime ns, path)``: not before ``floor``, not
        read in this run, not older than ``last`` (what was produced since the run began:
        such a late file is reported once and not read, or the order would break)."""
        found = []
        now = time.time()
        self.fs.invalidate_cache()  # (what another writer put there since the last look)
        try:
            listing = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            listing = {}
        for path, info in listing.items():
            relative = posixpath.relpath(path, self.root)
            name = posixpath.basename(path)
            if (info.get("type") != "file" or name.startswith((".", "_"))
                    or any(part.startswith((".", "_")) for part in relative.split("/")[:-1])
                    or not fnmatch.fnmatch(name, self.source.pattern)
                    or self.source.format_of(path) is None):  # fmt: skip
                continue
            mtime = _mtime_ns(info)
            if settle and now - mtime / 1e9 < self.source.settle:
                continue  # maybe still being written
            at = (mtime, relative)
            if at in self._done or (floor is not None and at < floor[:2]):
                continue
            if last is not None and at < last[:2]:
                if at not in self._late:
                    self._late.add(at)
                    why = (f"file {relative!r} arrived older (modified {mtime} ns) than files "
                           "already read: not read (touch it to have it read)")  # fmt: skip
                    log.warning("source %s: %s", self.source.name, why)
                    self.totals.errors.append(why)
                continue
            found.append(at)
        return sorted(found)

    def _read_file(self, file: tuple[int, str], writer: SourceWriter[Position]) -> None:
        mtime, relative = file
        source = self.source
        kind = source.format_of(relative)
        assert kind is not None
        self.totals.files += 1
        record = writer.record
        codec = source.codec
        through = kind == "jsonl" and isinstance(codec, JsonCodec) and codec.plain
        with self.fs.open(posixpath.join(self.root, relative), "rb") as stream:
            if through and writer.plain((mtime, relative)):
                self._read_plain(mtime, relative, stream, writer)
            else:
                for row, raw, value in _rows(kind, stream, source.csv_options):
                    record((mtime, relative, row), raw, value, encoded=raw if through else None)
        log.info("source %s: read %s", source.name, relative)

    def _read_plain(self, mtime: int, relative: str, stream: Any,
                    writer: SourceWriter[Position]) -> None:  # fmt: skip
        """A JSON-lines file whose records go out as read, keyed by a field, to partitions
        that have nothing of it (:meth:`SourceWriter.plain`): the producer is called here
        and the position header made from bytes (what ``writer.record`` would do, without
        its calls per record). A line that is not a JSON object with a string key as the
        strict decoder reads it goes through ``writer.record`` (its error, its policy)."""
        source = self.source
        scan, field_name, topic = _STRICT.raw_decode, source.key, source.topic
        produce, waiting = writer.producer.raw_produce, writer.producer.produce
        head, tail = f"{source.name}\t{mtime}\t".encode(), f"\t0\t{relative}".encode()
        done, last = 0, None
        try:
            for row, line in enumerate(stream):
                if not line.strip():
                    continue
                raw = line.rstrip(b"\r\n")
                try:
                    text = raw.decode()
                    value, end = scan(text)
                    key = value.get(field_name) if type(value) is dict else None
                except Exception:  # (leading blanks, bad JSON: the decoder's own error below)
                    key = end = None
                if type(key) is not str or end != len(text):
                    writer.count_plain(done, last)
                    done, last = 0, None
                    writer.record((mtime, relative, row), raw, _parsed(raw), encoded=raw)
                    continue
                headers = [(POSITION_HEADER, b"%s%d%s" % (head, row, tail))]
                try:
                    produce(topic, raw, key.encode(), partition=-1, timestamp=0,
                            headers=headers)  # fmt: skip
                except BufferError:
                    waiting(topic, raw, key.encode(), -1, 0, headers)
                done += 1
                last = (mtime, relative, row, 0)
                if done == 4096:  # the counts the monitor shows stay current
                    writer.count_plain(done, last)
                    done = 0
        finally:
            writer.count_plain(done, last)


def _rows(kind: str, stream: Any, csv_options: Mapping[str, Any] | None,
          ) -> Iterator[tuple[int, bytes, Any]]:  # fmt: skip
    """``(row, raw, record)`` of a file (an unparsable row's record: ``Unreadable``)."""
    if kind == "jsonl":
        for row, line in enumerate(stream):
            if line.strip():
                raw = line.rstrip(b"\r\n")
                yield row, raw, _parsed(raw)
    elif kind == "csv":
        text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
        try:
            reader = csv.DictReader(text, **dict(csv_options or {}))
            for row, record in enumerate(reader):
                raw = json.dumps(record).encode()
                if None in record or any(v is None for v in record.values()):
                    fields = len(reader.fieldnames or [])
                    yield row, raw, Unreadable(ValueError(f"expected {fields} fields"))
                else:
                    yield row, raw, record
        finally:
            text.detach()  # the stream is its opener's to close
    else:
        import pyarrow.parquet as pq

        row = 0
        for batch in pq.ParquetFile(stream).iter_batches(batch_size=65_536):
            for record in batch.to_pylist():
                yield row, json.dumps(record, default=str).encode(), record
                row += 1


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: JSON as the codec writes it: no NaN or Infinity (JSON lines pass through as read).
_STRICT = json.JSONDecoder(parse_constant=_no_constant)


def _parsed(raw: bytes) -> Any:
    """A JSON line's record (``Unreadable`` if it is not JSON)."""
    try:
        return _STRICT.decode(raw.decode())
    except ValueError as exc:  # (UnicodeDecodeError is one)
        return Unreadable(exc)


def _mtime_ns(info: Mapping[str, Any]) -> int:
    found: Any = info.get("mtime", info.get("LastModified", info.get("created", 0)))
    if hasattr(found, "timestamp"):
        seconds: float = found.timestamp()
        return round(seconds * 1e9)
    return round(float(found or 0) * 1e9)
