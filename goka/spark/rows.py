"""The rows a read of the Kafka source yields: records (schema :data:`SCHEMA`), and after each
topic's records a *range row* (``range_end`` not null, ``offset`` the range's start), so that a
consumer of the rows knows the exact ranges even where they hold no records."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from goka.spark.columns import column

if TYPE_CHECKING:
    import pyarrow as pa

    from goka.kafka.reader import Row

__all__ = ["SCHEMA", "arrow_schema", "range_rows", "record_rows"]

SCHEMA = (
    "partition int, topic string, offset long, key binary, value binary, timestamp long, "
    "headers array<struct<key:string,value:binary>>, range_end long"
)


@cache
def arrow_schema() -> pa.Schema:
    """:data:`SCHEMA` in Arrow."""
    import pyarrow as pa

    return pa.schema(
        [
            ("partition", pa.int32()),
            ("topic", pa.string()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("timestamp", pa.int64()),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ("range_end", pa.int64()),
        ]
    )


def record_rows(partition: int, rows: list[Row]) -> pa.RecordBatch:
    import pyarrow as pa

    topics, offsets, keys, values, timestamps, headers = (list(c) for c in zip(*rows, strict=True))
    header_values = [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([partition] * len(rows), pa.int32()),
            pa.array(topics, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(timestamps, pa.int64()),
            pa.array(header_values, arrow_schema().field("headers").type),
            pa.nulls(len(rows), pa.int64()),
        ],
        schema=arrow_schema(),
    )


def range_rows(
    partition: int, ranges: Mapping[str, tuple[int, int]], deadline_ms: int | None = None
) -> pa.RecordBatch:
    """Range rows; an epoch's carry its deadline (unix ms) as their timestamp."""
    import pyarrow as pa

    n = len(ranges)
    return pa.RecordBatch.from_arrays(
        [
            column([partition] * n, pa.int32()),
            column(list(ranges), pa.string()),
            column([s for s, _ in ranges.values()], pa.int64()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.int64())
            if deadline_ms is None
            else column([deadline_ms] * n, pa.int64()),
            pa.nulls(n, arrow_schema().field("headers").type),
            column([e for _, e in ranges.values()], pa.int64()),
        ],
        schema=arrow_schema(),
    )
