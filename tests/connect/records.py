"""What the connector tests write and compare with: records, rows and tables computed here."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pyarrow as pa

from goka import StringCodec
from goka.connect.rows import Record as Row
from goka.kafka.consumer import Record, read_to_end

from ..helpers import produce

T0 = 1_764_000_000_000  # 2025-11-24T16:00:00Z: the Parquet sink tests' first record time


def last_values(written: list[tuple[str, Any]]) -> dict[str, int]:
    """Each key's last value's ``n`` (a None value, a tombstone, deletes the key)."""
    table: dict[str, int] = {}
    for key, value in written:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value["n"]
    return table


def forget_progress(brokers: str, name: str) -> None:
    """Drop what source ``name`` noted in its progress topic (as if the crash came before a
    flush noted it)."""
    produce(brokers, f"goka-source-{name}", StringCodec(), [(name, None)])


def orders(first: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "user": f"u{i % 13}", "amount": i * 3} for i in range(first, first + n)]


def topic_records(brokers: str, topic: str) -> list[Record]:
    return list(read_to_end(brokers, topic, timeout=30))


def values(brokers: str, topic: str) -> Counter[str]:
    """Each record's value as text, counted (a duplicate counts twice)."""
    return Counter(json.dumps(json.loads(r.value or b""), sort_keys=True)
                   for r in topic_records(brokers, topic))  # fmt: skip


def want(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


def records(n: int, *, seed: int = 1, start: int = 0, step_ms: int = 1_000) -> list[Row]:
    """JSON values over 30 keys and 3 countries, a tombstone now and then."""
    rng = random.Random(seed)
    out: list[Row] = []
    for offset in range(start, start + n):
        key = f"user-{rng.randrange(30)}".encode()
        value = None if rng.random() < 0.1 else json.dumps(
            {"n": offset, "country": rng.choice(["DE", "FR", "NL"])}).encode()  # fmt: skip
        out.append(("clicks", offset, key, value, T0 + offset * step_ms, None))
    return out


def offsets_of(table: pa.Table) -> list[int]:
    return sorted(table.column("goka_offset").to_pylist())
