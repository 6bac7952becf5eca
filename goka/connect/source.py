"""What every source connector shares: its common options and the writer that leaves out what
was written before (the producer and the job's loop: :mod:`goka.connect.source_job`).

A source reads records from outside (files, a table, a database's change stream) in an order
of positions, and gives each to :meth:`SourceWriter.record`. The writer applies the source's
``transform``, key, timestamp and codec, and produces the results with the position in header
``goka-source`` (:mod:`goka.connect.positions`), leaving out any record at or below the last
position of the partition it goes to: so a restart at any moment neither loses nor duplicates
a record, as long as the source reads its records in the same order again from where it
resumes (:mod:`goka.connect.source_job` runs it). Bad records follow ``on_error``: ``fail``
(a :class:`~goka.connect.positions.SourceError` naming the record), ``skip`` (logged,
counted) or ``dead-letter`` (the record as read to the dead-letter topic, the reason in header
``goka-error``, resumed like the topic).
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from goka.codec import Codec
from goka.connect.positions import ERROR_HEADER, POSITION_HEADER
from goka.errors import ConfigurationError, SourceError
from goka.group.edges import spelled
from goka.partitioner import partition_for

__all__ = ["SourceOptions", "SourceTotals", "SourceWriter", "Unreadable", "as_ms",
           "check_number", "check_options", "field_of"]  # fmt: skip

if TYPE_CHECKING:
    from goka.connect.source_producer import SourceProducer

log = logging.getLogger(__name__)

P = TypeVar("P", bound=tuple[Any, ...])
POLICIES = ("fail", "skip", "dead-letter")
#: Leave the key to the source's ``key`` option (see :meth:`SourceWriter.record`).
FROM_OPTIONS: Any = object()


class SourceOptions(Protocol):
    """The options every source declaration has (see :class:`~goka.connect.FileSource`)."""

    @property
    def topic(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def codec(self) -> Codec[Any]: ...
    @property
    def key(self) -> str | Callable[[Any], Any] | None: ...
    @property
    def timestamp(self) -> str | Callable[[Any], int] | None: ...
    @property
    def transform(self) -> Callable[[Any], Any] | None: ...
    @property
    def on_error(self) -> str: ...
    @property
    def dead_letter(self) -> str | None: ...
    def describe(self) -> str: ...


def check_options(where: str, source: Any, topics: Sequence[str]) -> None:
    """Check the common options of a source declaration (``where`` names it; ``topics``:
    those it writes) and default its name to the first topic's.

    Raises:
        ConfigurationError: an invalid topic, codec, key, timestamp, transform or policy.
    """
    if not topics or not all(isinstance(t, str) and t for t in topics):
        raise ConfigurationError(f"{where}: topic must be a non-empty str")
    if not isinstance(source.codec, Codec):
        raise ConfigurationError(f"{where}: codec must be a goka Codec, got {source.codec!r}")
    for what in ("key", "timestamp"):
        found = getattr(source, what)
        if found is not None and not (isinstance(found, str) and found) and not callable(found):
            raise ConfigurationError(f"{where}: {what} must be a field name or callable")
    if source.transform is not None and not callable(source.transform):
        raise ConfigurationError(f"{where}: transform must be callable(record)")
    object.__setattr__(source, "on_error", spelled(source.on_error, f"{where}: on_error"))
    if source.on_error not in POLICIES:
        raise ConfigurationError(f"{where}: on_error must be 'fail', 'skip' or 'dead-letter', "
                                 f"got {source.on_error!r}")  # fmt: skip
    if (source.on_error == "dead-letter") != bool(source.dead_letter):
        raise ConfigurationError(f"{where}: on_error='dead-letter' and dead_letter=topic go "
                                 "together")  # fmt: skip
    if source.dead_letter in topics:
        raise ConfigurationError(f"{where}: the dead-letter topic is the topic itself "
                                 f"({source.dead_letter!r})")  # fmt: skip
    if not source.name:
        object.__setattr__(source, "name", topics[0])


def check_number(where: str, source: Any, what: str, *, integer: bool = False) -> None:
    """Check that option ``what`` of ``source`` is a number >= 0 (``integer``: an int >= 1).

    Raises:
        ConfigurationError: it is not.
    """
    found = getattr(source, what)
    if integer and (isinstance(found, bool) or not isinstance(found, int) or found < 1):
        raise ConfigurationError(f"{where}: {what} must be a positive int, got {found!r}")
    if isinstance(found, bool) or not isinstance(found, int | float) or found < 0:
        raise ConfigurationError(f"{where}: {what} must be a number >= 0, got {found!r}")


@dataclass
class SourceTotals:
    """What a source run did (``files``: the files read, or the queries or change reads
    made, as ``unit`` says)."""

    files: int = 0
    records: int = 0
    produced: int = 0
    already: int = 0
    filtered: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    errors: list[str] = field(default_factory=list)
    unit: str = "files"
    snapshot_rows: int = 0  # (a change source's: rows read by its snapshots)

    def describe(self) -> str:
        snapshot = f" ({self.snapshot_rows} by a snapshot)" if self.snapshot_rows else ""
        return (f"{self.records} records{snapshot} from {self.files} {self.unit}: "
                f"{self.produced} produced, {self.already} produced before, {self.filtered} "
                f"filtered out, {self.skipped} skipped, {self.dead_lettered} "
                "dead-lettered")  # fmt: skip


class SourceWriter(Generic[P]):
    """Produces a source's records, leaving out those at or below their partition's last
    position (see the module docstring).

    Args:
        source: the declaration.
        producer: where records go.
        positions: each partition's last position (None: none written).
        counts: the partition count of each topic written.
        totals: counted into.
        header: a position as the text of its header (after the source's name and a tab).
        where: a position as an error names it (``file 'a.csv' row 3``).
        fnv1a: the producer's partitioner is fnv1a (goka's; the writer leaves keyed records
            to it where it need not know their partition).
    """

    def __init__(self, source: SourceOptions, producer: SourceProducer,
                 positions: dict[tuple[str, int], P | None], counts: dict[str, int],
                 totals: SourceTotals, *, header: Callable[[P], str],
                 where: Callable[[tuple[Any, ...]], str], fnv1a: bool = True) -> None:  # fmt: skip
        self.source, self.producer, self.totals = source, producer, totals
        self.positions, self.counts = positions, counts
        known = [p for p in positions.values() if p is not None]
        #: The highest position written (this run's records included).
        self.last: P | None = max(known) if known else None
        self._checked_until = self.last  # above it no partition has written anything
        self._header, self._where = header, where
        self._key, self._time, self._encode = source.key, source.timestamp, source.codec.encode
        self._transform, self._name, self._dead_letter = (source.transform, source.name,
                                                          source.dead_letter)  # fmt: skip
        self._produce = producer.raw_produce
        self._fnv1a = fnv1a  # the producer partitions keys as partition_for does

    def record(self, at: tuple[Any, ...], raw: bytes | None, record: Any, *,
               key: Any = FROM_OPTIONS,
               headers: Sequence[tuple[str, bytes]] = (), stamp: int | None = None,
               topic: str | None = None, encoded: bytes | None = None,
               tombstone: bool = False) -> None:  # fmt: skip
        """Produce what ``record`` (read at ``at``; ``raw``: as read, for a dead letter; None:
        the record as JSON) gives: the transform's outputs, each at ``at`` + its index.
        ``key`` overrides the source's ``key`` (bytes, or None); a ``tombstone`` is produced
        without a value (no transform; ``record`` is what keys it); ``stamp`` overrides its
        timestamp; ``topic`` the topic; ``encoded`` is the record as the codec would encode
        it, if the reader knows (JSON as read)."""
        self.totals.records += 1
        transform = self._transform
        if transform is None and not tombstone and type(record) is dict:
            try:  # the common case, kept short: one record as read
                data = self._encode(record) if encoded is None else encoded
                found = self._key_of(record) if key is FROM_OPTIONS else key
                when = (0 if self._time is None else self._time_of(record)) if stamp is None \
                    else stamp  # fmt: skip
            except Exception as exc:
                self._failed(at, raw, record, exc)
                return
            self.produce(topic or self.source.topic, cast(P, (*at, 0)), found, data, when,
                         headers)  # fmt: skip
            return
        try:
            if isinstance(record, Unreadable):
                raise record.error
            if transform is None or tombstone:
                outputs: Any = (record,)  # (the common case: one record as read)
            else:
                encoded = None
                outputs = transform(record)
                if outputs is None:
                    self.totals.filtered += 1
                    return
                if not isinstance(outputs, list):
                    outputs = (outputs,)
            produced = []
            for index, output in enumerate(outputs):
                found = self._key_of(output) if key is FROM_OPTIONS else key
                when = (0 if self._time is None else self._time_of(output)) if stamp is None \
                    else stamp  # fmt: skip
                if tombstone:
                    value = None
                else:
                    value = self._encode(output) if encoded is None else encoded
                produced.append((cast(P, (*at, index)), found, value, when))
        except Exception as exc:
            self._failed(at, raw, record, exc)
            return
        into = topic or self.source.topic
        for position, found, value, when in produced:
            self.produce(into, position, found, value, when, headers)

    def plain(self, first: tuple[Any, ...]) -> bool:
        """Whether a reader may produce records at positions beyond ``first`` itself, as
        read (see :meth:`count_plain`): no transform, no timestamp, keys from a field named by
        a string, goka's partitioner, and no partition has written anything there."""
        return self._time is None and type(self._key) is str and self.direct(first)

    def direct(self, first: tuple[Any, ...]) -> bool:
        """Whether a reader that keys its records itself may produce them at positions
        beyond ``first`` as they are (encoded by the codec, with its own timestamp): no
        transform, goka's partitioner, and no partition has written anything there."""
        checked = self._checked_until
        return self._transform is None and self._fnv1a and (checked is None or first > checked)

    def count_plain(self, records: int, last: P | None) -> None:
        """``records`` were read and produced by the reader itself, the last at ``last``."""
        self.totals.records += records
        self.totals.produced += records
        if last is not None:
            self.last = last

    def produce(self, topic: str, position: P, key: bytes | None, value: bytes | None,
                stamp: int, extra: Sequence[tuple[str, bytes]] = (),
                partition: int | None = None) -> None:  # fmt: skip
        """Produce one record at ``position`` (into ``partition``, or its key's) unless its
        partition has it already (records come in position order)."""
        checked = self._checked_until
        if partition is not None:
            pass  # (the reader's choice)
        elif key is None:
            partition = zlib.crc32(repr(position).encode()) % self.counts[topic]
        elif (checked is not None and position <= checked) or not self._fnv1a:
            partition = partition_for(key, self.counts[topic])
        else:  # nothing written there yet: the producer's partitioner (the same: fnv1a)
            partition = -1
        if checked is not None and position <= checked:
            done = self.positions.get((topic, partition))
            if done is not None and position <= done:
                self.totals.already += 1
                return
        header = (POSITION_HEADER, f"{self._name}\t{self._header(position)}".encode())
        headers = [header, *extra] if extra else [header]
        try:  # (the producer's own call: a frame less per record)
            self._produce(topic, value, key, partition=partition, timestamp=stamp,
                          headers=headers)  # fmt: skip
        except BufferError:
            self.producer.produce(topic, value, key, partition, stamp, headers)
        if topic == self._dead_letter:
            self.totals.dead_lettered += 1
        else:
            self.totals.produced += 1
        self.last = position

    def reach(self, position: P) -> None:
        """Reading got to ``position`` with nothing more to produce below it (a source's
        milestone, such as a snapshot's end: the next checkpoint keeps it in the progress
        topic)."""
        if self.last is None or position > self.last:
            self.last = position

    def _key_of(self, record: Any) -> bytes | None:
        key = self._key
        if key is None:
            return None
        if type(record) is dict and type(key) is str:
            found = record.get(key)
            if type(found) is str:
                return found.encode()
        else:
            found = key(record) if callable(key) else field_of(record, key)
        if found is None:
            raise ValueError(f"no key: field {key!r} is missing" if isinstance(key, str)
                             else "the key function returned None")  # fmt: skip
        return found if isinstance(found, bytes) else str(found).encode()

    def _time_of(self, record: Any) -> int:
        stamp = self._time
        assert stamp is not None
        return as_ms(stamp(record) if callable(stamp) else field_of(record, stamp))

    def _failed(self, at: tuple[Any, ...], raw: bytes | None, record: Any,
                exc: Exception) -> None:  # fmt: skip
        source = self.source
        why = f"{self._where(at)}: {type(exc).__name__}: {exc}"
        if source.on_error == "fail":
            self.producer.flush()
            raise SourceError(f"source {source.name!r}: {why}") from exc
        self.totals.errors.append(why)
        if source.on_error == "skip":
            log.warning("source %s: skipped %s", source.name, why)
            self.totals.skipped += 1
            return
        assert source.dead_letter is not None
        if raw is None:
            raw = json.dumps(record, default=str).encode()
        self.produce(source.dead_letter, cast(P, (*at, 0)), None, raw, 0,
                     [(ERROR_HEADER, why.encode())])  # fmt: skip


class Unreadable:
    """A record that could not be read (its error is raised where the policy applies)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def field_of(record: Any, name: str) -> Any:
    """Field ``name`` of a record (a dict).

    Raises:
        ValueError: the record is not a dict.
    """
    if not isinstance(record, dict):
        raise ValueError(f"field {name!r}: the record is a {type(record).__name__}, not an object")
    return record.get(name)


def as_ms(found: Any) -> int:
    """A timestamp as milliseconds since the epoch: milliseconds (an int, or its digits), an
    ISO 8601 string or a datetime (naive: UTC).

    Raises:
        ValueError: none of these.
    """
    import datetime as dt

    if isinstance(found, str) and found.isdigit():  # (CSV: every field is text)
        found = int(found)
    if isinstance(found, str):
        found = dt.datetime.fromisoformat(found)
    if isinstance(found, dt.datetime):
        aware = found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)
        return round(aware.timestamp() * 1000)
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise ValueError(f"timestamp {found!r} is not milliseconds or an ISO 8601 time")
    return int(found)
