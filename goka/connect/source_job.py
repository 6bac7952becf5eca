"""Running a source connector in this process: resume from the positions in its topics, read
what is new, flush, confirm, and look again (see :mod:`goka.connect.source`)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Generic

from goka.connect.positions import last_positions
from goka.connect.source import P, SourceTotals, SourceWriter
from goka.connect.source_producer import SourceProducer
from goka.connect.status import ConnectorStatus, Lifecycle
from goka.errors import SourceError

__all__ = ["SourceJob"]

log = logging.getLogger(__name__)


class SourceJob(Generic[P]):
    """Runs a source in this process: resumes from the positions in its topics, reads what is
    new (:meth:`read`, each source's own), flushes, and, when watching, looks again every
    ``poll_interval`` until :meth:`stop`.

    Args:
        source: the declaration (with ``poll_interval``).
        brokers: bootstrap servers.
        kafka_config: librdkafka settings of the producer and of the resume's reads.
    """

    #: What :attr:`SourceTotals.files` counts for this source.
    unit = "files"

    def __init__(self, source: Any, brokers: str, *,
                 kafka_config: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.source, self.brokers = source, brokers
        self.kafka_config = dict(kafka_config or {})
        self.totals = SourceTotals(unit=self.unit)
        self._stop = threading.Event()
        self.lifecycle = Lifecycle()
        self._writer: SourceWriter[P] | None = None

    def status(self) -> ConnectorStatus:
        """What the job says of itself (see :class:`~goka.connect.status.ConnectorStatus`)."""
        totals, writer, life = self.totals, self._writer, self.lifecycle
        counts = {
            name: int(getattr(totals, name))
            for name in (
                "files",
                "records",
                "produced",
                "already",
                "filtered",
                "skipped",
                "dead_lettered",
            )
        }
        counts[self.unit] = counts.pop("files")
        positions = (
            {}
            if writer is None
            else {
                f"{t}/{p}": self.where(at)
                for (t, p), at in sorted(writer.positions.items())
                if at is not None
            }
        )
        last = None if writer is None or writer.last is None else self.where(writer.last)
        return ConnectorStatus(
            self.source.name, "source", type(self.source).__name__, life.state,
            self.source.describe(), self.topics, counts, positions, last,
            life.last_commit, list(totals.errors[-20:]), life.failure,
        )  # fmt: skip

    # -- what each source defines ----------------------------------------------------------------
    @property
    def topics(self) -> list[str]:
        """The topics the source writes (its dead-letter topic included)."""
        topics = list(getattr(self.source, "topics", None) or [self.source.topic])
        return topics + ([self.source.dead_letter] if self.source.dead_letter else [])

    def parse(self, text: str) -> P:
        """A position from its header text."""
        raise NotImplementedError

    def header(self, position: P) -> str:
        """A position as its header text."""
        raise NotImplementedError

    def where(self, position: tuple[Any, ...]) -> str:
        """A position (or the record part of one) as errors name it."""
        raise NotImplementedError

    def read(self, writer: SourceWriter[P], floor: P | None, first: bool, watch: bool) -> None:
        """Give the writer every record beyond ``floor`` (None: from the beginning) there is
        now, in position order (``first``: the run's first read)."""
        raise NotImplementedError

    def begin(self) -> None:
        """A run begins: before its positions are read (a source may take a lock here)."""

    def close(self) -> None:
        """Let go of what the reads hold (connections); called when a run ends."""

    def milestone(self, position: P) -> bool:
        """Whether ``position`` marks where reading got to rather than a record (see
        :meth:`SourceWriter.reach`): a progress topic may hold it beyond every record."""
        return False

    def flushed(self, writer: SourceWriter[P]) -> None:
        """Everything given to ``writer`` so far is acknowledged (a change stream confirms
        its position here)."""

    # -- progress --------------------------------------------------------------------------------
    @property
    def progress_topic(self) -> str:
        """Where the source notes how far every record is acknowledged (one compacted
        partition, like Kafka Connect's offsets topic): a restart begins there at the
        earliest, even when some partition never got a record."""
        return f"goka-source-{self.source.name}"

    def checkpoint(self, writer: SourceWriter[P]) -> None:
        """Wait for every record given to ``writer``, let the source confirm them
        (:meth:`flushed`), and note the position they reach in :attr:`progress_topic`."""
        writer.producer.flush()
        self.flushed(writer)
        last, saved = writer.last, self._saved
        if last is not None and self._saved_ok and (saved is None or last >= saved):
            text = self.note(last)  # (at the same position, a source's state may have moved)
            if last != saved or text != self._saved_text:
                writer.producer.produce(self.progress_topic, text.encode(),
                                        self.source.name.encode(), 0, 0, [])  # fmt: skip
                writer.producer.flush()
                self._saved, self._saved_text = last, text
        self.lifecycle.committed()

    def _progress(self) -> P | None:
        """The position noted last in :attr:`progress_topic` (None: none; the topic is made
        if missing, and progress is not kept if it cannot be)."""
        from goka.kafka.consumer import last_records
        from goka.topic_manager import TopicManager

        topic = self.progress_topic
        try:
            TopicManager(self.brokers, **self.kafka_config).ensure_table_exists(topic, 1)
            found = last_records(self.brokers, [topic], kafka_config=self.kafka_config)
        except Exception as exc:  # (a speed-up only: every partition's last record suffices)
            log.warning("source %s: no progress topic %s (%s): a restart may read again from "
                        "the beginning", self.source.name, topic, exc)  # fmt: skip
            self._saved_ok = False
            return None
        record = found.get((topic, 0))
        if record is None or record.value is None or record.key != self.source.name.encode():
            return None
        self._saved_text = text = record.value.decode()
        self.noted(text)
        return self.parse(text)

    def note(self, position: P) -> str:
        """The text :attr:`progress_topic` keeps for ``position`` (a source may add its own
        state after it; :meth:`parse` reads the position back)."""
        return self.header(position)

    def noted(self, text: str) -> None:
        """The text :attr:`progress_topic` held at the start (a source's state in it)."""

    _saved: P | None = None
    _saved_text: str | None = None
    _saved_ok = True

    # -- running ---------------------------------------------------------------------------------
    def positions(self) -> dict[tuple[str, int], P | None]:
        """Each partition's last position (None: nothing written)."""
        found = last_positions(self.brokers, self.topics, self.source.name, self.kafka_config)
        return {tp: None if p is None else self.parse(p) for tp, p in found.items()}

    def offsets(self) -> dict[str, str]:
        """Each partition's last position as text (``topic/partition`` -> position)."""
        return {f"{t}/{p}": self.where(at) for (t, p), at in sorted(self.positions().items())
                if at is not None}  # fmt: skip

    @staticmethod
    def floor(positions: dict[tuple[str, int], P | None]) -> P | None:
        """Where reading may resume: every partition's last record lies at or beyond it
        (None: some partition was never written, so from the beginning)."""
        known = list(positions.values())
        if not known or None in known:
            return None
        return min(p for p in known if p is not None)

    def reset(self) -> None:
        raise SourceError(f"source {self.source.name!r}: its positions are the last records of "
                          f"{self.topics}; delete the topics' records to start over")  # fmt: skip

    def run_until_caught_up(self) -> SourceTotals:
        """Produce what there is now (beyond the positions), then stop."""
        return self._run(watch=False)

    def run(self, timeout: float | None = None) -> SourceTotals:
        """Produce what there is now and, if the source watches, what comes, until
        :meth:`stop` (or ``timeout``)."""
        if timeout is not None:
            threading.Timer(timeout, self._stop.set).start()
        return self._run(watch=bool(getattr(self.source, "watch", True)))

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self, watch: bool) -> SourceTotals:
        from goka.kafka.config import producer_config
        from goka.kafka.offsets import EndOffsets

        try:
            self.begin()
        except BaseException:
            self.close()
            raise
        positions = self.positions()
        progress = self._progress()  # (before the producer: see its docstring)
        ends = EndOffsets(self.brokers, self.kafka_config)
        try:
            counts = ends.partition_counts(self.topics)
        finally:
            ends.close()
        config = producer_config(self.brokers, self.kafka_config)
        producer = SourceProducer(config)
        writer = SourceWriter(self.source, producer, positions, counts, self.totals,
                              header=self.header, where=self.where,
                              fnv1a=config.get("partitioner") == "fnv1a")  # fmt: skip
        floor, first = self.floor(positions), True
        known = [p for p in positions.values() if p is not None]
        if progress is not None and (not known or progress > max(known)) \
                and not self.milestone(progress):  # fmt: skip
            log.warning("source %s: %s says %s, beyond every record of %s (records deleted, "
                        "topics made anew?): reading from the beginning", self.source.name,
                        self.progress_topic, self.where(progress), self.topics)  # fmt: skip
            progress = None  # (a record at the progress is in some partition, or lost)
        if progress is not None and (floor is None or progress > floor):
            floor = progress  # (everything up to it is acknowledged: no need to read it)
        self._writer, self._saved = writer, progress
        self.lifecycle.running()
        error: BaseException | None = None
        try:
            while True:
                self.read(writer, floor, first, watch)
                first = False
                self.checkpoint(writer)
                if not watch or self._stop.wait(self.source.poll_interval):
                    break
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                producer.flush()
            finally:
                self.close()
                self.lifecycle.ended(error)
        return self.totals
