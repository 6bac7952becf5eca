"""Recovery of a partition store: bring it to the position a micro-batch starts from.

A partition store (a group's state, or a joined table's copy) reflects its *topic* (the group
table, or the joined table) up to an offset it records, and, for group state, the input offsets
it has applied. A store is **current** when it has applied at least the batch's start offsets;
it is then used as it is (``reused`` if it stayed open since an earlier task, ``opened``).

Otherwise the store needs a *base* (a state at input offsets not beyond the batch's start, with
its topic offset) and then the topic's tail from that offset:

* ``caught_up``: the local store itself is such a base (the partition was elsewhere for a
  while); only the records written since are read;
* ``restored``: a snapshot from the checkpoint location is newer than the local store: it is
  fetched (every file verified) and made the store; a damaged one is skipped with a warning
  naming the file, for an older one;
* ``rebuilt``: no base at all: the whole topic is read (``created`` when it was empty).

Replaying the group table and time sections leaves out records written by attempts of batches
that did not finish (their headers name a source offset at or beyond the batch's start): those
batches run again; the stream time is the highest the kept rows name. Values are written in
chunks, the offsets last, so a recovery interrupted anywhere is redone; a replay onto a store
with offsets (a local base, a snapshot) first sets them to -1 in one write: an interrupted one
leaves a store claiming nothing, not values beyond its offsets (current for a batch below them).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from goka.errors import SnapshotError, StorageError
from goka.kafka.reader import RecordReader, Row
from goka.keys import key_str
from goka.processing.applied import checked_watermarks, commit, from_unfinished_batch
from goka.processing.leases import Lease
from goka.storage import WriteBatch
from goka.storage.snapshots import Manifest, SnapshotStore, install, remove_abandoned
from goka.time.rows import STREAM_TIME_HEADER, section_rows, stream_time_key

__all__ = ["ORIGINS", "Recovery", "StoreRecovery", "checked_watermarks"]

log = logging.getLogger(__name__)
#: How often a long replay says how far it got.
_PROGRESS_SECONDS = 2.0

#: How a store was made current, cheapest first (see the module docstring).
ORIGINS = ("reused", "opened", "caught_up", "restored", "rebuilt", "created")

#: Values written per write batch while replaying a topic.
CHUNK = 50_000


@dataclass
class Recovery:
    """What bringing a store to a batch's start did (``origin``: see the module docstring)."""

    origin: str = ""
    records: int = 0
    restored_bytes: int = 0
    restore_seconds: float = 0.0
    snapshot: str = ""


class StoreRecovery:
    """Recovers one store of one partition (see the module docstring).

    Args:
        lease: the store, lent by the worker (replaced in place when restored).
        name: the store's name in snapshots (``partition``, ``join-<table>``).
        group, partition: whose store it is.
        topic: the topic the store copies (None: a store of offsets only, nothing to replay).
        reader: reads the topic.
        manifests: returns the partition's snapshots, newest first (read at most once).
        snapshots: where they are fetched from (None: snapshots are off).
        scratch: a directory on the store's file system for fetching snapshots.
        read_timeout: seconds to read the tail.
        report: told ``(state, records read, records to read)`` while the store is made
            current: ``restoring`` (a snapshot, an older copy) or ``rebuilding`` (the topic).
        sections: the changelogs of the store's sections (timers, window tables), each with
            the grace its index rows derive from (None: timers), replayed like ``topic``.
    """

    def __init__(
        self,
        lease: Lease,
        name: str,
        *,
        group: str,
        partition: int,
        topic: str | None,
        reader: RecordReader,
        manifests: Callable[[], list[Manifest]],
        snapshots: SnapshotStore | None,
        scratch: Path,
        read_timeout: float,
        report: Callable[[str, int, int], None] = lambda state, records, of: None,
        sections: Mapping[str, int | None] | None = None,
    ) -> None:
        self.lease, self.name, self.group, self.partition = lease, name, group, partition
        self.topic, self.reader = topic, reader
        self.manifests, self.snapshots = manifests, snapshots
        self.scratch, self.read_timeout, self.report = scratch, read_timeout, report
        self.sections, self.stream_time = dict(sections or {}), -1  # what kept rows say
        self._state = "restoring"

    def positions(self, topics: Mapping[str, int]) -> dict[str, int]:
        """The store's offsets of ``topics`` (-1: none)."""
        stored = self.lease.storage.offsets()
        return {t: stored.get((t, self.partition), -1) for t in topics}

    def recover(
        self, target: Mapping[str, int], *, end: int | None = None, unfinished: bool = False
    ) -> Recovery:
        """Make the store current for ``target`` offsets.

        Args:
            target: ``{topic: offset}`` the batch starts from.
            end: replay the topic up to here (default: its high watermark).
            unfinished: leave out replayed records whose source offset (a header) is at or
                beyond ``target`` of their source topic (group tables).

        Returns:
            What was done; the store then records ``target`` and the topic's replayed end.
        """
        if all(o >= target[t] for t, o in self.positions(target).items()):
            if self.lease.fresh and self.topic is not None:  # opened: still the topic's copy?
                self._check(self.lease.storage.offsets().get((self.topic, self.partition), -1))
            return Recovery("reused" if not self.lease.fresh else "opened")
        started = time.monotonic()
        recovery, base = self._base(target)
        offsets = self.lease.storage.offsets()  # the base's: before they are disowned
        section_bases = {t: offsets.get((t, self.partition), -1) for t in self.sections}
        if self.topic is None:  # offsets only: those already further stay where they are
            stored = self.positions(target)
            self._write(WriteBatch(), {t: max(o, stored[t]) for t, o in target.items()}, {})
            return Recovery("created")
        if base is None:
            self.lease.storage.clear()
            section_bases = dict.fromkeys(section_bases, -1)
        else:  # values go onto a store with offsets, in chunks: it claims none until done
            self._disown()
        low, high = self._check(-1 if base is None else base)
        self._state = "rebuilding" if base is None else "restoring"
        base = low if base is None else base
        last = end if end is not None else high
        self.report(self._state, 0, max(0, last - base))
        starts = target if unfinished else None
        recovery.records, skipped = self._replay(self.topic, base, last, starts)
        # a store never claims a record it left out: a later recovery to a further target
        # replays the topic from the first one left out (what it applied again is idempotent)
        ends = {self.topic: last if skipped is None else skipped}
        self.stream_time = -1
        for topic, from_offset in section_bases.items():
            low, high = checked_watermarks(self.reader, topic, self.partition, from_offset,
                                           f"group {self.group!r} (store {self.name})")  # fmt: skip
            first = max(from_offset, low)
            read, left_out = self._replay(topic, first, high, starts)
            recovery.records += read
            ends[topic] = high if left_out is None else left_out
        self._write(self._stream_time_row(), target, ends)
        if not recovery.origin:
            recovery.origin = "rebuilt" if recovery.records else "created"
        log.info(
            "group %s partition %d: store %s %s%s, %d records of %s replayed in %.2fs",
            self.group, self.partition, self.name, recovery.origin,
            f" from snapshot {recovery.snapshot}" if recovery.snapshot else "",
            recovery.records, self.topic, time.monotonic() - started,
        )  # fmt: skip
        return recovery

    def catch_up_tail(self, inputs: list[str]) -> int:
        """Under exactly-once, for a store current for its ``inputs``: replay what
        transactions committed to its changelogs beyond the store's ends, and return how many
        records were read. A crash between a commit and the store's write that moved no input
        offset (final results delivered, timers fired on ticks) leaves them there. A
        changelog one past the store's end holds only the commit's marker, the usual case:
        nothing is read. Records written for input offsets the store has not applied are left
        out, as :meth:`recover` leaves them out (their input records are processed next: a
        group whose offsets went back, say, or an at-least-once run's unfinished commit)."""
        stored, ends, read = self.lease.storage.offsets(), {}, 0
        applied = {t: stored.get((t, self.partition), -1) for t in inputs}
        self.stream_time = -1
        for topic in [t for t in (self.topic, *self.sections) if t is not None]:
            at = max(stored.get((topic, self.partition), 0), 0)
            high = self.reader.watermarks(topic, self.partition)[1]
            if high > at + 1:
                found, left_out = self._replay(topic, at, high, applied)
                read += found
                ends[topic] = high if left_out is None else left_out
        if ends:
            self._write(self._stream_time_row(), {}, ends)
        return read

    def _check(self, offset: int) -> tuple[int, int]:
        assert self.topic is not None
        who = f"group {self.group!r} (store {self.name})"
        return checked_watermarks(self.reader, self.topic, self.partition, offset, who)

    # -- choosing and installing a base --------------------------------------------------------
    def _base(self, target: Mapping[str, int]) -> tuple[Recovery, int | None]:
        """Find the best base: the local store or a snapshot; return where to replay from."""
        local = self._local_base(target)
        for manifest in self._candidates(target):
            snapshot = manifest.stores[self.name]
            if local is not None and _progress(local[0], target) >= _progress(
                _offsets_of(snapshot.offsets, target, self.partition), target
            ):
                break
            recovery, replaced = self._restore(manifest)
            if recovery is not None:
                return recovery, snapshot.offsets.get((self.topic or "", self.partition))
            if replaced:
                local = None  # the failed restore had replaced the local store already
        if local is not None:
            return Recovery("caught_up"), local[1]
        return Recovery(), None

    def _local_base(self, target: Mapping[str, int]) -> tuple[dict[str, int], int] | None:
        """The local store's offsets and topic offset, if it can be a base."""
        if self.topic is None:
            return None
        positions = self.positions(target)
        topic_offset = self.lease.storage.offsets().get((self.topic, self.partition), -1)
        if topic_offset < 0 or any(o > target[t] for t, o in positions.items()):
            return None
        return positions, topic_offset

    def _candidates(self, target: Mapping[str, int]) -> list[Manifest]:
        """Snapshots of this store not beyond ``target``, most progressed first."""
        if self.snapshots is None or self.topic is None:
            return []
        usable = []
        for manifest in self.manifests():
            store = manifest.stores.get(self.name)
            if store is None or (self.topic, self.partition) not in store.offsets:
                continue
            offsets = _offsets_of(store.offsets, target, self.partition)
            if all(o <= target[t] for t, o in offsets.items()):
                usable.append(manifest)
        return sorted(
            usable,
            key=lambda m: (
                _progress(_offsets_of(m.stores[self.name].offsets, target, self.partition), target),
                m.id,
            ),
            reverse=True,
        )

    def _restore(self, manifest: Manifest) -> tuple[Recovery | None, bool]:
        """Fetch a snapshot of this store and make it the store.

        Returns:
            What was done (None: the snapshot is not usable), and whether the local store was
            replaced (by an empty one, when the snapshot failed after replacing it).
        """
        assert self.snapshots is not None
        started = time.monotonic()
        remove_abandoned(self.scratch)
        directory = self.scratch / f"{self.partition}-{os.getpid()}-{secrets.token_hex(4)}"
        replaced = False
        try:
            fetched = self.snapshots.fetch(manifest, self.name, directory / self.name)
            install(manifest, self.name, directory / self.name)
            replaced = True
            self.lease.replace(directory / self.name)
            found = self.lease.storage.offsets()
            expected = manifest.stores[self.name].offsets
            if any(found.get(tp) != o for tp, o in expected.items()):
                raise SnapshotError(
                    f"snapshot {manifest.id}: restored store has offsets {found}, "
                    f"the manifest says {expected}"
                )
        except (SnapshotError, StorageError, OSError) as exc:
            log.warning(
                "group %s partition %d: snapshot %s of store %s not used: %s",
                self.group, self.partition, manifest.id, self.name, exc,
            )  # fmt: skip
            if replaced:
                self.lease.reset()
            return None, replaced
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return Recovery("restored", 0, fetched, time.monotonic() - started, manifest.id), True

    # -- replaying the topic -------------------------------------------------------------------
    def _replay(
        self, topic: str, start: int, end: int, starts: Mapping[str, int] | None
    ) -> tuple[int, int | None]:
        """Apply ``topic``'s records ``[start, end)`` (the store's topic, or a section's
        changelog), leaving out those written for source offsets at or beyond ``starts``;
        return how many were read and the offset of the first left out (None: none)."""
        if start >= end:
            return 0, None
        batch, read, skipped = WriteBatch(), 0, None
        rows_of = self.reader.read(self.partition, {topic: (start, end)}, self.read_timeout, CHUNK)
        shown = time.monotonic()
        for rows in rows_of:
            read += len(rows)
            self.report(self._state, read, end - start)
            if time.monotonic() - shown >= _PROGRESS_SECONDS:
                shown = time.monotonic()
                log.info("group %s: restoring partition %d (%s): %s of %s records",
                         self.group, self.partition, self.topic, f"{read:,}",
                         f"{end - start:,}")  # fmt: skip
            if topic in self.sections:
                first = self._apply_section(batch, topic, rows, starts)
            else:
                first = _apply(batch, rows, starts)
            skipped = first if skipped is None else skipped
            if len(batch) >= CHUNK:
                self.lease.storage.write(batch)
                batch = WriteBatch()
        self.lease.storage.write(batch)
        return read, skipped

    def _apply_section(
        self, batch: WriteBatch, topic: str, rows: list[Row], starts: Mapping[str, int] | None
    ) -> int | None:
        """Add a section changelog's ``rows`` (with their derived index rows) to ``batch``;
        return the offset of the first left out (None: none)."""
        pending, section, skipped = batch.section(topic), self.lease.storage.section(topic), None
        grace = self.sections[topic]

        def old(row: str) -> bytes | None:
            return pending[row] if row in pending else section.get(row)

        stream_key, stream_time = stream_time_key(self.partition).encode(), self.stream_time
        for _, offset, key, value, _, headers in rows:
            if starts is not None and from_unfinished_batch(headers, starts):
                skipped = offset if skipped is None else skipped
                continue
            for name, found in headers or ():
                if name == STREAM_TIME_HEADER:
                    stream_time = max(stream_time, int(found))
            if key == stream_key:  # the highest kept: a cut batch's row may come later
                stream_time = max(stream_time, int(value or b"-1"))
            elif key is not None:
                pending.update(section_rows(old, key_str(key), value, grace=grace))
        self.stream_time = stream_time
        return skipped

    def _stream_time_row(self) -> WriteBatch:
        """The partition's stream time after the replay: the highest the base and the kept
        changelog rows say (rows and headers of the records that moved it, see
        :meth:`goka.time.partition.PartitionTime.raised`), whatever order runs wrote them in."""
        batch, timers = WriteBatch(), [t for t, grace in self.sections.items() if grace is None]
        if self.stream_time >= 0 and timers:
            key = stream_time_key(self.partition)
            stored = int(self.lease.storage.section(timers[0]).get(key) or b"-1")
            batch.section(timers[0])[key] = b"%d" % max(self.stream_time, stored)
        return batch

    def _disown(self) -> None:
        """Set every offset of the store to -1 (none) in one write: a replay interrupted
        after some of its values leaves a store that is neither current for any batch nor a
        base for a recovery (its values are beyond its offsets), so it is rebuilt."""
        storage = self.lease.storage
        storage.write(WriteBatch(offsets=dict.fromkeys(storage.offsets(), -1)))

    def _write(self, batch: WriteBatch, target: Mapping[str, int], ends: Mapping[str, int]) -> None:
        for topic, offset in {**target, **ends}.items():
            batch.set_offset(topic, self.partition, offset)
        who = f"group {self.group!r} partition {self.partition} (store {self.name})"
        commit(self.lease.storage, batch, who=who)


def _apply(batch: WriteBatch, rows: list[Row], starts: Mapping[str, int] | None) -> int | None:
    """Add ``rows`` to ``batch``; return the offset of the first left out (None: none)."""
    values, skipped = batch.values, None
    for _, offset, key, value, _, headers in rows:
        if starts is not None and from_unfinished_batch(headers, starts):
            skipped = offset if skipped is None else skipped
        elif key is not None:
            values[key.decode("utf-8", "surrogateescape")] = value  # goka.keys.key_str
    return skipped


def _offsets_of(offsets: Mapping[tuple[str, int], int], target: Mapping[str, int],
                partition: int) -> dict[str, int]:  # fmt: skip
    return {t: offsets.get((t, partition), -1) for t in target}


def _progress(offsets: Mapping[str, int], target: Mapping[str, int]) -> int:
    return sum(max(offsets.get(t, -1), 0) for t in target)
