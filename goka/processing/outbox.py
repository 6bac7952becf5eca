"""Where a partition's final results may already be, under at-least-once (the outbox of
:mod:`goka.processing.finals`): before its first result a partition records, as rows of its
timers section, where each output partition stood (``p<topic>\\0<partition>``, moved at each
delivery); a task that begins after a crash reads each output partition from there and
produces only the results it does not find (each names itself in the header
:data:`FINAL_ID`). Under exactly-once a delivery is committed in transactions: nothing is read back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from goka.kafka.reader import RecordReader

__all__ = ["FINAL_ID", "POSITION", "position_key", "produced", "standing"]

#: Header naming a final result: ``<group>/<partition>/<window>/<key>@<start>-<end>``.
FINAL_ID = "goka-final-id"
#: The prefix of the rows saying where an output partition stood.
POSITION = "p"


def position_key(topic: str, partition: int) -> str:
    """The timers row saying where ``topic``'s ``partition`` stood."""
    return f"{POSITION}{topic}\x00{partition}"


def standing(section: Any, outputs: Iterable[str], count: Callable[[str], int],
             reader: RecordReader) -> dict[str, bytes | None]:  # fmt: skip
    """The rows to write for the output partitions whose standing ``section`` does not
    record yet: where each ends now (``count(topic)``: its partitions)."""
    rows: dict[str, bytes | None] = {}
    for topic in sorted(outputs):
        for partition in range(count(topic)):
            key = position_key(topic, partition)
            if section.get(key) is None:
                rows[key] = b"%d" % reader.watermarks(topic, partition)[1]
    return rows


def produced(section: Any, reader: RecordReader, prefix: str, read_timeout: float) -> set[str]:
    """The ids of the results beginning with ``prefix`` (``<group>/<partition>/``) found in
    the output partitions, from where each stood."""
    mine, found = prefix.encode(), set()
    for key, value in section.items(prefix=POSITION):
        topic, _, partition = key[1:].rpartition("\x00")
        start, end = int(value), reader.watermarks(topic, int(partition))[1]
        if start >= end:
            continue
        for chunk in reader.read(int(partition), {topic: (start, end)}, read_timeout, 10_000):
            for record in chunk:
                ident = dict(record[5] or ()).get(FINAL_ID)
                if ident is not None and ident.startswith(mine):
                    found.add(ident.decode())
    return found
