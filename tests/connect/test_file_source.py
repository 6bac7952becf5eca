"""The file source on real files and the embedded broker: JSON lines, CSV and Parquet files
into a topic, each record once, keyed and partitioned like goka's emitters, with its position
in a header; a rerun produces nothing again; a run stopped part-way (records of some
partitions lost before delivery) resumes exactly; transforms map, filter and flat-map; bad
rows fail naming the file and row, are skipped, or go to a dead-letter topic; watching picks
up files that arrive; a partition written by someone else stops the source."""

from __future__ import annotations

import csv
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from goka import JsonCodec, StringCodec
from goka.connect import FileSource, FileSourceJob, SourceError
from goka.connect.positions import POSITION_HEADER
from goka.errors import ConfigurationError
from goka.partitioner import partition_for

from ..helpers import produce, wait_for
from .records import forget_progress, orders, topic_records, values, want

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000


def write_jsonl(path: Path, rows: list[dict[str, Any]], mtime: int | None = None) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_jsonl_csv_and_parquet_files_each_record_once_keyed_with_positions(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    write_jsonl(tmp_path / "a.jsonl", orders(0, 300), mtime=1_000)
    with open(tmp_path / "b.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, ["id", "user", "amount"])
        writer.writeheader()
        writer.writerows({k: str(v) for k, v in r.items()} for r in orders(300, 200))
    os.utime(tmp_path / "b.csv", (2_000, 2_000))
    pq.write_table(pa.Table.from_pylist(orders(500, 250)), tmp_path / "c.parquet")
    os.utime(tmp_path / "c.parquet", (3_000, 3_000))
    (tmp_path / "_hidden.jsonl").write_text('{"id": -1, "user": "x"}\n')  # never read
    (tmp_path / "notes.txt").write_text("not a format the source reads")
    source = FileSource(str(tmp_path), topic, key="user",
                        timestamp=lambda r: T0 + int(r["id"]))  # fmt: skip
    totals = FileSourceJob(source, brokers).run_until_caught_up()
    assert (totals.files, totals.records, totals.produced) == (3, 750, 750)
    expected = orders(0, 300) + [{k: str(v) for k, v in r.items()} for r in orders(300, 200)]
    assert values(brokers, topic) == want(expected + orders(500, 250))
    for record in topic_records(brokers, topic):
        value = json.loads(record.value or b"")
        assert record.key == value["user"].encode()
        assert record.partition == partition_for(record.key, 4)  # as goka's emitters
        assert record.timestamp == T0 + int(value["id"])
        header = dict(record.headers)[POSITION_HEADER].decode().split("\t")
        assert header[0] == topic and header[-1] in ("a.jsonl", "b.csv", "c.parquet")
    again = FileSourceJob(source, brokers).run_until_caught_up()  # a rerun: nothing again
    assert again.produced == 0 and (again.files, again.already) == (1, 250)  # files before
    # the one every partition's last record comes from are not even opened
    assert sum(values(brokers, topic).values()) == 750


def test_a_run_that_lost_some_partitions_records_resumes_exactly(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    rows = orders(0, 900)
    for number in range(3):
        write_jsonl(tmp_path / f"{number}.jsonl", rows[number * 300 : (number + 1) * 300],
                    mtime=1_000 + number)  # fmt: skip
    # A crash as the producer may leave it: partitions 0 and 1 got every record of the first
    # two files, partition 2 only the first file's, partition 3 nothing yet.
    source = FileSource(str(tmp_path), topic, key="user")
    reached = {0: 2, 1: 2, 2: 1, 3: 0}

    def first(record: dict[str, Any]) -> Any:
        return record if record["id"] // 300 < reached[partition_for(record["user"].encode(),
                                                                     4)] else None  # fmt: skip

    partial = FileSource(str(tmp_path), topic, key="user", transform=first)
    FileSourceJob(partial, brokers).run_until_caught_up()
    forget_progress(brokers, topic)  # (the crash came before a flush noted it)
    assert sum(values(brokers, topic).values()) < 900
    totals = FileSourceJob(source, brokers).run_until_caught_up()
    assert values(brokers, topic) == want(rows)
    assert totals.already + totals.produced == 900


def test_transforms_map_filter_and_flat_map(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    write_jsonl(tmp_path / "a.jsonl", orders(0, 30))

    def explode(record: dict[str, Any]) -> Any:
        if record["id"] % 3 == 0:
            return None  # filtered out
        if record["id"] % 3 == 1:
            return {**record, "amount": -record["amount"]}  # mapped
        return [{"id": record["id"], "part": n} for n in range(2)]  # flat-mapped

    totals = FileSourceJob(FileSource(str(tmp_path), topic, key="id", transform=explode),
                           brokers).run_until_caught_up()  # fmt: skip
    expected = []
    for r in orders(0, 30):
        if r["id"] % 3 == 1:
            expected.append({**r, "amount": -r["amount"]})
        elif r["id"] % 3 == 2:
            expected += [{"id": r["id"], "part": n} for n in range(2)]
    assert values(brokers, topic) == want(expected)
    assert totals.filtered == 10 and totals.produced == 30
    again = FileSourceJob(FileSource(str(tmp_path), topic, key="id", transform=explode),
                          brokers).run_until_caught_up()  # fmt: skip
    assert again.produced == 0  # flat-mapped outputs resume by their index too


def test_bad_rows_fail_skip_or_go_to_the_dead_letter_topic(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, dead = new_topic(partitions=2), new_topic(partitions=1)
    (tmp_path / "a.jsonl").write_text('{"id": 1, "user": "a"}\n{"id": 2, oops\n'
                                      '{"id": 3}\n{"id": 4, "user": "b"}\n')  # fmt: skip
    with pytest.raises(SourceError, match=r"file 'a.jsonl' row 1: JSONDecodeError"):
        FileSourceJob(FileSource(str(tmp_path), topic, key="user"), brokers).run_until_caught_up()
    assert sum(values(brokers, topic).values()) == 1  # what came before is delivered
    other = new_topic(partitions=2)
    skipping = FileSourceJob(FileSource(str(tmp_path), other, key="user", on_error="skip"),
                             brokers)  # fmt: skip
    totals = skipping.run_until_caught_up()
    assert totals.skipped == 2 and "row 2: ValueError: no key: field 'user' is missing" in (
        totals.errors[1])  # fmt: skip
    third = new_topic(partitions=2)
    lettered = FileSource(str(tmp_path), third, key="user", on_error="dead-letter",
                          dead_letter=dead)  # fmt: skip
    assert FileSourceJob(lettered, brokers).run_until_caught_up().dead_lettered == 2
    letters = topic_records(brokers, dead)
    assert [r.value for r in letters] == [b'{"id": 2, oops', b'{"id": 3}']
    assert b"row 1: JSONDecodeError" in dict(letters[0].headers)["goka-error"]
    assert FileSourceJob(lettered, brokers).run_until_caught_up().dead_lettered == 0
    assert len(topic_records(brokers, dead)) == 2  # dead letters resume too


def test_json_lines_produced_as_read_equal_what_the_general_path_produces(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A JSON-lines file keyed by a field name is produced by the reader itself (the fast
    path); a key function takes the general path. Both give the same records, headers and
    counts, also for lines the fast path hands over: blanks around the JSON, a number for a
    key, a missing key, an array, bad JSON, NaN, an empty line."""
    lines = [json.dumps(r) for r in orders(0, 40)]
    lines[5] = '  {"id": 5, "user": "u5", "amount": 15}  '
    lines[9] = '{"id": 9, "user": 90, "amount": 27}'
    lines[14:17] = ['{"id": 14}', "[1, 2]", '{"id": 16, oops']
    lines[20] = '{"id": 20, "user": "u7", "amount": NaN}'
    lines[25] = ""
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    seen = []
    for name, key in (("fast", "user"), ("general", lambda r: r["user"])):
        topic = new_topic(partitions=3)
        source = FileSource(str(tmp_path), topic, key=key, on_error="skip", name=name)
        totals = FileSourceJob(source, brokers).run_until_caught_up()
        found = topic_records(brokers, topic)
        assert all(r.timestamp > 0 for r in found)  # the producer's time, both ways
        seen.append(([(r.partition, r.key, r.value,
                       dict(r.headers)[POSITION_HEADER].removeprefix(name.encode()))
                      for r in found], (totals.records, totals.produced, totals.skipped)))  # fmt: skip
    assert seen[0][1] == (39, 35, 4)  # the empty line is no record
    assert sorted(seen[0][0]) == sorted(seen[1][0]) and seen[0][1] == seen[1][1]
    pairs = {(key, value) for _, key, value, _ in seen[0][0]}
    assert (b"u5", b'  {"id": 5, "user": "u5", "amount": 15}  ') in pairs  # as read
    assert (b"90", b'{"id": 9, "user": 90, "amount": 27}') in pairs


def test_watching_reads_files_as_they_arrive(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    write_jsonl(tmp_path / "a.jsonl", orders(0, 50))
    job = FileSourceJob(FileSource(str(tmp_path), topic, key="user", watch=True,
                                   poll_interval=0.1, settle=0.2), brokers)  # fmt: skip
    thread = threading.Thread(target=job.run, kwargs={"timeout": 60})
    thread.start()
    try:
        wait_for(lambda: job.totals.produced == 50, what="the first file")
        staged = tmp_path / ".b.jsonl"
        write_jsonl(staged, orders(50, 70))
        staged.rename(tmp_path / "b.jsonl")  # whole when it appears
        wait_for(lambda: job.totals.produced == 120, what="the file that arrived")
    finally:
        job.stop()
        thread.join(30)
    assert values(brokers, topic) == want(orders(0, 120))


def test_a_partition_written_by_someone_else_stops_the_source(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    produce(brokers, topic, StringCodec(), [("k", "from an emitter")])
    write_jsonl(tmp_path / "a.jsonl", orders(0, 5))
    with pytest.raises(SourceError, match=r"partition 0 offset 0 was written by no source"):
        FileSourceJob(FileSource(str(tmp_path), topic), brokers).run_until_caught_up()


@pytest.mark.parametrize(
    ("options", "message"),
    [({"path": ""}, "path must be"), ({"format": "xml"}, "format must be"),
     ({"key": 3}, "key must be a field name"), ({"on_error": "dead-letter"}, "go together"),
     ({"on_error": "dead-letter", "dead_letter": "t"}, "the topic itself"),
     ({"poll_interval": -1}, "poll_interval"), ({"codec": "json"}, "codec must be")],
)  # fmt: skip
def test_invalid_declarations_fail_at_once(options: dict[str, Any], message: str) -> None:
    path = options.pop("path", "/tmp/in")
    with pytest.raises(ConfigurationError, match=message):
        FileSource(path, "t", **{"codec": JsonCodec(), **options})


def test_a_restart_begins_at_the_progress_even_with_partitions_never_written(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    for number in range(5):  # one key: three of the four partitions never get a record
        write_jsonl(tmp_path / f"{number}.jsonl", orders(number * 100, 100), mtime=1_000 + number)
    source = FileSource(str(tmp_path), topic, key=lambda r: "one", name="progress-test")
    assert FileSourceJob(source, brokers).run_until_caught_up().produced == 500
    again = FileSourceJob(source, brokers).run_until_caught_up()
    assert (again.produced, again.files) == (0, 1)  # the progress' file only, not all five
    assert values(brokers, topic) == want(orders(0, 500))
    elsewhere = new_topic(partitions=2)  # the same name on an empty topic: the progress is
    moved = FileSource(str(tmp_path), elsewhere, key="user", name="progress-test")  # ignored
    assert FileSourceJob(moved, brokers).run_until_caught_up().produced == 500
