"""The windowed groups the Kafka Streams comparison runs (module-level, so Spark pickles their
functions by reference), their input, and a reference computed here from the input alone.

Kafka Streams' rules, which goka-py's are compared with: each input partition keeps its stream
time (the largest record time seen); a record goes to the windows containing its time
(``start <= t < end``, windows aligned to the epoch) that are still open; a window is open
while ``end + grace > stream time`` (the record's own time counted first); a window's final
result is emitted once the stream time reaches ``end + grace``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from goka import (
    Context,
    Hopping,
    Int64Codec,
    StringCodec,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    window,
)

MINUTE = 60_000
GRACE = 10_000
#: name -> (size, advance) of the windows compared, as Kafka Streams' TimeWindows.
WINDOWS = {"tumbling": (MINUTE, MINUTE), "hopping": (5 * MINUTE, MINUTE)}
#: 2026-01-01T00:00:00Z: the input's first minute.
START = 1_767_225_600_000


def count(ctx: Context[int], page: str) -> None:
    ctx.window("w").update(lambda n: (n or 0) + 1)


def late(ctx: Context[int], page: str, window: Any) -> None:
    """A record all of whose windows were closed: where it was, to the late topic."""
    ctx.emit(f"{ctx.group}-late", ctx.key, f"{ctx.partition} {ctx.offset}")


def group(topic: str, name: str) -> Any:
    size, advance = WINDOWS[name]
    spec = Tumbling(size) if size == advance else Hopping(size, advance)
    return define_group(
        f"{topic}-{name}", input(topic, StringCodec(), count),
        window("w", spec, Int64Codec(), grace=GRACE, emit="final",
               output=f"{topic}-{name}-finals", late=late),
        output(f"{topic}-{name}-finals", Int64Codec()),
        output(f"{topic}-{name}-late", StringCodec()),
        persist(Int64Codec()),
    )  # fmt: skip


def events(n: int, keys: int, seed: int) -> list[tuple[str, int]]:
    """(key, time) of ``n`` clicks over ~40 minutes: out of order by up to 40 s, and every
    25th from 1-7 minutes back (late for some or all of its windows)."""
    rng = random.Random(seed)
    found = []
    for i in range(n):
        at = START + i * 40 * MINUTE // n + rng.randint(-40_000, 2_000)
        if i % 25 == 24:
            at -= rng.randint(MINUTE, 7 * MINUTE)
        found.append((f"user-{rng.randrange(keys)}", max(at, START)))
    return found


def windows_of(at: int, size: int, advance: int) -> list[tuple[int, int]]:
    """The windows (start, end) containing ``at``."""
    last = at - at % advance
    return [(s, s + size) for s in range(last - size + advance, last + 1, advance) if s >= 0]


def reference(
    partitions: dict[int, list[tuple[int, str, int]]], name: str
) -> tuple[Counter[tuple[str, int]], set[tuple[int, int]], int]:
    """From the records of each partition in order ((offset, key, time)): the final results
    ((key, window start) -> count) of the windows closed by the end, the records late for all
    their windows ((partition, offset)), and how many records were late for some only."""
    size, advance = WINDOWS[name]
    finals: Counter[tuple[str, int]] = Counter()
    late_records: set[tuple[int, int]] = set()
    partly = 0
    for partition, records in partitions.items():
        stream = -1
        counts: Counter[tuple[str, int, int]] = Counter()
        for offset, key, at in records:
            stream = max(stream, at)
            windows = windows_of(at, size, advance)
            open_ = [w for w in windows if w[1] + GRACE > stream]
            if not open_:
                late_records.add((partition, offset))
            partly += 0 < len(open_) < len(windows)
            for start, end in open_:
                counts[(key, start, end)] += 1
        for (key, start, end), n in counts.items():
            if end + GRACE <= stream:
                finals[(key, start)] = n
    return finals, late_records, partly
