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
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from goka.codec import Codec, JsonCodec
from goka.connect.positions import POSITION_HEADER, SourceError, last_positions
from goka.errors import ConfigurationError
from goka.partitioner import partition_for

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
            ``"dead_letter"`` (to ``dead_letter``, with the reason in header ``goka-error``).
        dead_letter: the dead-letter topic (``on_error="dead_letter"``).
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
    on_error: Literal["fail", "skip", "dead_letter"] = "fail"
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
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"{where}: topic must be a non-empty str")
        if not isinstance(self.codec, Codec):
            raise ConfigurationError(f"{where}: codec must be a goka Codec, got {self.codec!r}")
        if self.format not in (None, "jsonl", "csv", "parquet"):
            raise ConfigurationError(f"{where}: format must be 'jsonl', 'csv' or 'parquet', "
                                     f"got {self.format!r}")  # fmt: skip
        for what in ("key", "timestamp"):
            found = getattr(self, what)
            if found is not None and not (isinstance(found, str) and found) and not callable(found):
                raise ConfigurationError(f"{where}: {what} must be a field name or callable")
        if self.transform is not None and not callable(self.transform):
            raise ConfigurationError(f"{where}: transform must be callable(record)")
        if self.on_error not in ("fail", "skip", "dead_letter"):
            raise ConfigurationError(f"{where}: on_error must be 'fail', 'skip' or "
                                     f"'dead_letter', got {self.on_error!r}")  # fmt: skip
        if (self.on_error == "dead_letter") != bool(self.dead_letter):
            raise ConfigurationError(f"{where}: on_error='dead_letter' and dead_letter=topic "
                                     "go together")  # fmt: skip
        if self.dead_letter == self.topic:
            raise ConfigurationError(f"{where}: the dead-letter topic is the topic itself")
        for what in ("poll_interval", "settle"):
            if not isinstance(getattr(self, what), (int, float)) or getattr(self, what) < 0:
                raise ConfigurationError(f"{where}: {what} must be a number >= 0")
        if not self.name:
            object.__setattr__(self, "name", self.topic)

    def describe(self) -> str:
        return self.path

    def format_of(self, path: str) -> Format | None:
        """The format of the file at ``path`` (None: not one the source reads)."""
        if self.format is not None:
            return self.format
        suffix = posixpath.splitext(path)[1].lower()
        found = _SUFFIXES.get(suffix)
        return found  # type: ignore[return-value]


@dataclass
class SourceTotals:
    """What a source run did."""

    files: int = 0
    records: int = 0
    produced: int = 0
    already: int = 0
    filtered: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    errors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"{self.records} records from {self.files} files: {self.produced} produced, "
                f"{self.already} produced before, {self.filtered} filtered out, {self.skipped} "
                f"skipped, {self.dead_lettered} dead-lettered")  # fmt: skip


class FileSourceJob:
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
        from fsspec.core import url_to_fs

        self.source, self.brokers = source, brokers
        self.kafka_config = dict(kafka_config or {})
        self.fs, root = url_to_fs(source.path, **dict(source.storage_options or {}))
        self.root = root.rstrip("/") or "/"
        self.totals = SourceTotals()
        self._stop = threading.Event()
        self._late: set[tuple[int, str]] = set()

    # -- positions -------------------------------------------------------------------------------
    def positions(self) -> dict[tuple[str, int], Position | None]:
        """Each partition's last position (None: nothing written)."""
        topics = [self.source.topic] + ([self.source.dead_letter] if self.source.dead_letter
                                        else [])  # fmt: skip
        found = last_positions(self.brokers, topics, self.source.name, self.kafka_config)
        return {tp: None if p is None else _parse(p) for tp, p in found.items()}

    def offsets(self) -> dict[int, str]:
        """The topic's partitions' last positions as text (file and row)."""
        return {p: f"{at[1]} row {at[2]}" + (f" output {at[3]}" if at[3] else "")
                for (t, p), at in self.positions().items()
                if t == self.source.topic and at is not None}  # fmt: skip

    def reset(self) -> None:
        raise SourceError(f"source {self.source.name!r}: its positions are the last records "
                          f"of {self.source.topic!r}; delete the topic's records to start "
                          "over")  # fmt: skip

    # -- running ---------------------------------------------------------------------------------
    def run_until_caught_up(self) -> SourceTotals:
        """Produce the files there now (beyond the positions), then stop."""
        return self._run(watch=False)

    def run(self, timeout: float | None = None) -> SourceTotals:
        """Produce the files there now and, if the source watches, those that arrive, until
        :meth:`stop` (or ``timeout``)."""
        if timeout is not None:
            threading.Timer(timeout, self._stop.set).start()
        return self._run(watch=self.source.watch)

    def stop(self) -> None:
        self._stop.set()

    def _run(self, watch: bool) -> SourceTotals:
        from goka.kafka.config import producer_config
        from goka.kafka.offsets import EndOffsets

        source = self.source
        positions = self.positions()
        ends = EndOffsets(self.brokers, self.kafka_config)
        try:
            topics = [source.topic] + ([source.dead_letter] if source.dead_letter else [])
            counts = ends.partition_counts(topics)
        finally:
            ends.close()
        failures: list[str] = []

        def delivered(err: Any, message: Any) -> None:
            if err is not None:
                failures.append(f"topic {message.topic()!r}: {err}")

        producer = _Producer(producer_config(self.brokers, self.kafka_config), delivered,
                             failures)  # fmt: skip
        writer = _Writer(source, producer, positions, counts, self.totals)
        # Every partition's last record comes from this file or a later one: the files before
        # it are done (a partition never written: every file is read again, and checked).
        known = list(positions.values())
        floor = None if not known or None in known else min(p for p in known if p is not None)
        done: set[tuple[int, str]] = set()
        first = True
        try:
            while True:
                files = self._new_files(floor, done, None if first else writer.last, watch)
                first = False
                for file in files:
                    self._read_file(file, writer)
                    done.add(file)
                    if self._stop.is_set():
                        break
                producer.flush()
                if not watch or self._stop.wait(source.poll_interval):
                    break
        finally:
            producer.flush()
        return self.totals

    def _new_files(self, floor: Position | None, done: set[tuple[int, str]],
                   last: Position | None, settle: bool) -> list[tuple[int, str]]:  # fmt: skip
        """The files to read, in order, as ``(mtime ns, path)``: not before ``floor``, not
        read in this run, not older than ``last`` (what was produced since the run began:
        such a late file is reported once and not read, or the order would break)."""
        found = []
        now = time.time()
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
            if at in done or (floor is not None and at < floor[:2]):
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

    def _read_file(self, file: tuple[int, str], writer: _Writer) -> None:
        mtime, relative = file
        source = self.source
        kind = source.format_of(relative)
        assert kind is not None
        self.totals.files += 1
        with self.fs.open(posixpath.join(self.root, relative), "rb") as stream:
            for row, raw, record in _rows(kind, stream, source.csv_options):
                writer.record((mtime, relative, row, 0), raw, record)
        log.info("source %s: read %s", source.name, relative)


class _Producer:
    """An idempotent producer; delivery failures stop the source at the next flush."""

    def __init__(self, config: dict[str, Any], delivered: Callable[[Any, Any], None],
                 failures: list[str]) -> None:  # fmt: skip
        import confluent_kafka

        self._producer = confluent_kafka.Producer(config)
        self._delivered, self._failures = delivered, failures

    def produce(self, topic: str, value: bytes | None, key: bytes | None,
                partition: int | None, timestamp: int, headers: list[Any]) -> None:  # fmt: skip
        produce = self._producer.produce
        while True:
            try:
                if partition is None:
                    produce(topic, value, key, timestamp=timestamp, headers=headers,
                            on_delivery=self._delivered)  # fmt: skip
                else:
                    produce(topic, value, key, partition=partition, timestamp=timestamp,
                            headers=headers, on_delivery=self._delivered)  # fmt: skip
                break
            except BufferError:
                self._producer.poll(0.05)

    def flush(self) -> None:
        while self._producer.flush(1.0) > 0:
            pass
        if self._failures:
            raise SourceError(f"records could not be produced: {self._failures[:3]}")


class _Writer:
    """Produces a source's records, leaving out those at or below their partition's last
    position."""

    def __init__(self, source: FileSource, producer: _Producer,
                 positions: dict[tuple[str, int], Position | None], counts: dict[str, int],
                 totals: SourceTotals) -> None:  # fmt: skip
        self.source, self.producer, self.positions, self.totals = (
            source,
            producer,
            positions,
            totals,
        )
        self.counts = counts
        known = [p for p in positions.values() if p is not None]
        #: The highest position written.
        self.last: Position | None = max(known) if known else None
        #: Below this every partition is done: nothing to check.
        self.checked_until = max(known) if known else (-1, "", -1, -1)
        self._key, self._time = source.key, source.timestamp
        self._encode = source.codec.encode

    def record(self, at: Position, raw: bytes, record: Any) -> None:
        """Produce what ``record`` (read at ``at``; ``raw``: as read) gives."""
        totals, source = self.totals, self.source
        totals.records += 1
        try:
            if isinstance(record, _Unreadable):
                raise record.error
            outputs = [record] if source.transform is None else source.transform(record)
            if outputs is None:
                totals.filtered += 1
                return
            if not isinstance(outputs, list):
                outputs = [outputs]
            produced = []
            for index, output in enumerate(outputs):
                key = self._key_of(output)
                stamp = self._time_of(output)
                produced.append(((*at[:3], index), key, self._encode(output), stamp))
        except Exception as exc:
            self._failed(at, raw, exc)
            return
        for position, key, value, stamp in produced:
            self._produce(source.topic, position, key, value, stamp, [])

    def _produce(self, topic: str, position: Position, key: bytes | None, value: bytes,
                 stamp: int, extra: list[Any]) -> None:  # fmt: skip
        count = self.counts[topic]
        partition = (partition_for(key, count) if key is not None else
                     zlib.crc32(f"{position[1]}\0{position[2]}".encode()) % count)  # fmt: skip
        if position <= self.checked_until:
            done = self.positions.get((topic, partition))
            if done is not None and position <= done:
                self.totals.already += 1
                return
        header = (f"{self.source.name}\t{position[0]}\t{position[2]}\t{position[3]}\t"
                  f"{position[1]}").encode()  # fmt: skip
        self.producer.produce(topic, value, key, partition, stamp,
                              [(POSITION_HEADER, header), *extra])  # fmt: skip
        if topic == self.source.topic:
            self.totals.produced += 1
        else:
            self.totals.dead_lettered += 1
        if self.last is None or position > self.last:
            self.last = position

    def _key_of(self, record: Any) -> bytes | None:
        key = self._key
        if key is None:
            return None
        found = key(record) if callable(key) else _field(record, key)
        if found is None:
            raise ValueError(f"no key: field {key!r} is missing" if isinstance(key, str)
                             else "the key function returned None")  # fmt: skip
        return str(found).encode()

    def _time_of(self, record: Any) -> int:
        stamp = self._time
        if stamp is None:
            return 0
        found = stamp(record) if callable(stamp) else _field(record, stamp)
        if isinstance(found, str) and found.isdigit():  # (CSV: every field is text)
            found = int(found)
        if isinstance(found, str):
            import datetime as dt

            parsed = dt.datetime.fromisoformat(found)
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            return round(parsed.timestamp() * 1000)
        if isinstance(found, bool) or not isinstance(found, int) or found < 0:
            raise ValueError(f"timestamp {found!r} is not milliseconds or an ISO 8601 time")
        return int(found)

    def _failed(self, at: Position, raw: bytes, exc: Exception) -> None:
        source = self.source
        why = f"file {at[1]!r} row {at[2]}: {type(exc).__name__}: {exc}"
        if source.on_error == "fail":
            self.producer.flush()
            raise SourceError(f"source {source.name!r}: {why}") from exc
        self.totals.errors.append(why)
        if source.on_error == "skip":
            log.warning("source %s: skipped %s", source.name, why)
            self.totals.skipped += 1
            return
        assert source.dead_letter is not None
        self._produce(source.dead_letter, at, None, raw, 0, [("goka-error", why.encode())])


class _Unreadable:
    """A row that could not be parsed (its error raised where the policy applies)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _rows(kind: str, stream: Any, csv_options: Mapping[str, Any] | None,
          ) -> Iterator[tuple[int, bytes, Any]]:  # fmt: skip
    """``(row, raw, record)`` of a file (an unparsable row's record: :class:`_Unreadable`)."""
    if kind == "jsonl":
        loads = json.loads
        for row, line in enumerate(stream):
            if not line.strip():
                continue
            try:
                yield row, line.rstrip(b"\r\n"), loads(line)
            except ValueError as exc:
                yield row, line.rstrip(b"\r\n"), _Unreadable(exc)
    elif kind == "csv":
        text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
        try:
            reader = csv.DictReader(text, **dict(csv_options or {}))
            for row, record in enumerate(reader):
                raw = json.dumps(record).encode()
                if None in record or any(v is None for v in record.values()):
                    fields = len(reader.fieldnames or [])
                    yield row, raw, _Unreadable(ValueError(f"expected {fields} fields"))
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


def _field(record: Any, name: str) -> Any:
    if not isinstance(record, dict):
        raise ValueError(f"field {name!r}: the record is a {type(record).__name__}, not an object")
    return record.get(name)


def _parse(text: str) -> Position:
    mtime, row, index, path = text.split("\t", 3)
    return (int(mtime), path, int(row), int(index))


def _mtime_ns(info: Mapping[str, Any]) -> int:
    found: Any = info.get("mtime", info.get("LastModified", info.get("created", 0)))
    if hasattr(found, "timestamp"):
        seconds: float = found.timestamp()
        return round(seconds * 1e9)
    return round(float(found or 0) * 1e9)
