"""Sinks' dead letters on a real server and broker: records that cannot be decoded, keyed or
stored (a value that does not fit its column) go to partition p of the dead-letter topic
with their position and reason, before the write commits; a write replayed after a crash
between the two sends none twice; the Parquet sink alike; a dead-letter topic with fewer
partitions is refused with a clear error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from goka import JsonCodec
from goka.connect import ParquetSink, ParquetWriter, PostgresSink, PostgresWriter, SinkError
from goka.connect.dead_letters import ERROR_HEADER, DeadLetters
from goka.connect.positions import POSITION_HEADER
from goka.connect.rows import Record
from goka.kafka.consumer import read_to_end

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

T0 = 1_700_000_000_000


def batch(partition_offsets: range) -> list[Record]:
    """Good records, with bad ones among them: offset % 10 == 3 undecodable, % 10 == 7 with
    a value that does not fit the ``clicks`` column (bigint), % 25 == 0 without a key."""
    out: list[Record] = []
    for offset in partition_offsets:
        key = None if offset % 25 == 0 else f"u{offset % 13}".encode()
        value = (b"{broken" if offset % 10 == 3 else json.dumps(
            {"clicks": "many" if offset % 10 == 7 else offset}).encode())  # fmt: skip
        out.append(("clicks", offset, key, value, T0 + offset, None))
    return out


def bad_offsets(offsets: range) -> list[int]:
    return [o for o in offsets if o % 10 in (3, 7) or o % 25 == 0]


def letters(brokers: str, topic: str) -> list[Any]:
    return list(read_to_end(brokers, topic, timeout=30))


def test_postgres_sink_dead_letters_go_out_once_before_the_commit(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    dead = new_topic(partitions=2)
    sink = PostgresSink("clicks", JsonCodec(), dsn, table="clicks", on_error="dead-letter",
                        dead_letter=dead)  # fmt: skip
    with PostgresWriter(sink) as writer:
        writer.write(1, [("clicks", 0, b"a", b'{"clicks": 1}', T0, None)], 1)  # the column
        sender = DeadLetters(sink, brokers)
        summary = writer.write(1, batch(range(1, 200)), 200, dead_letters=sender.send)
        sender.close()
    found = letters(brokers, dead)
    assert [r.offset for r in found] == list(range(len(bad_offsets(range(1, 200)))))
    assert all(r.partition == 1 for r in found)
    assert [int(dict(r.headers)[POSITION_HEADER].split(b"\t")[2]) for r in found] == bad_offsets(
        range(1, 200)
    )
    errors = {int(dict(r.headers)[POSITION_HEADER].split(b"\t")[2]): dict(r.headers)[ERROR_HEADER]
              for r in found}  # fmt: skip
    assert b"column 'clicks' (bigint) takes no str" in errors[7]
    assert b"JSONDecodeError" in errors[3] or b"Error" in errors[3]
    assert b"no key" in errors[25]
    assert len(summary.dead_letters) == len(found) and not summary.skipped
    with psycopg.connect(dsn) as conn:
        count = conn.execute("SELECT count(*) FROM clicks").fetchone()
    assert count is not None and count[0] <= 200 - len(found)

    class Crash(Exception):
        pass

    def crashing(partition: int, refused: Any) -> int:  # sends, then the commit never comes
        sent = DeadLetters(sink, brokers).send(partition, refused)
        raise Crash(sent)

    with PostgresWriter(sink) as writer:
        with pytest.raises(Crash):
            writer.write(1, batch(range(200, 300)), 300, dead_letters=crashing)
        assert writer.offsets() == {1: 200}
        sender = DeadLetters(sink, brokers)
        writer.write(1, batch(range(200, 300)), 300, dead_letters=sender.send)
        sender.close()
        replayed = DeadLetters(sink, brokers)  # an older replay: below the database's offset
        writer.write(1, batch(range(100, 300)), 300, dead_letters=replayed.send)
        replayed.close()
    found = letters(brokers, dead)
    offsets = [int(dict(r.headers)[POSITION_HEADER].split(b"\t")[2]) for r in found]
    assert offsets == bad_offsets(range(1, 300))  # each once, in order


def test_parquet_sink_dead_letters_and_a_short_dead_letter_topic(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    dead = new_topic(partitions=1)
    sink = ParquetSink("clicks", JsonCodec(), str(tmp_path / "archive"), on_error="dead-letter",
                       dead_letter=dead)  # fmt: skip
    writer = ParquetWriter(sink)
    sender = DeadLetters(sink, brokers)
    summary = writer.write(0, batch(range(60)), 60, dead_letters=sender.send)
    sender.close()
    refused = bad_offsets(range(60))  # ("many" does not fit the int64 column either)
    assert [int(dict(r.headers)[POSITION_HEADER].split(b"\t")[2])
            for r in letters(brokers, dead)] == refused  # fmt: skip
    assert summary.appended == 60 - len(refused)
    with pytest.raises(SinkError, match=r"has 1 partitions; partition 3 of 'clicks' needs"):
        DeadLetters(sink, brokers).send(3, [(batch(range(3, 4))[0], "why")])
