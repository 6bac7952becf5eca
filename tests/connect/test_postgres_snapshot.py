"""The change source's initial snapshot on a real server: a table's existing rows read in the
snapshot exported with the slot while a writer changes it, then its changes, each key's
records a gapless run of versions (a read, then every change once, in commit order) ending
equal to the table; a snapshot cut half-way goes on in chunks between watermarks beside the
changes since its slot; the modes (never, initial_only, when_needed, initial after a reset)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from goka.connect import PostgresCdcSource, PostgresCdcSourceJob
from goka.connect.postgres_cdc import OP_HEADER
from goka.errors import ConfigurationError, SourceError
from goka.kafka.consumer import read_to_end

from ..helpers import wait_for
from .versions import Writer, check_runs, execute, items

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

psycopg = pytest.importorskip("psycopg")


def test_existing_rows_then_their_changes_while_a_writer_runs(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=3)
    items(dsn, 30_000)
    writer = Writer(dsn, 1, 30_001)
    try:
        source = PostgresCdcSource(dsn, {"public.items": topic})
        first = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
        assert first.snapshot_rows >= 30_000 * 0.9
    finally:
        writer.close()
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    ops = check_runs(brokers, topic, dsn)
    assert ops[b"r"] == first.snapshot_rows and writer.done > 100
    assert sum(ops.values()) - ops[b"r"] <= writer.done  # (changes before the slot: in reads)
    again = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert (again.produced, again.snapshot_rows) == (0, 0)


def test_past_its_transaction_time_a_snapshot_goes_on_in_chunks_beside_a_writer(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=3)
    items(dsn, 20_000)
    writer = Writer(dsn, 2, 20_001)
    try:  # (every chunk in a window: 20 windows of 1,000 rows while the writer runs)
        source = PostgresCdcSource(dsn, {"public.items": topic}, snapshot_chunk=1000,
                                   snapshot_transaction=0)  # fmt: skip
        first = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    finally:
        writer.close()
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    ops = check_runs(brokers, topic, dsn, reads_twice=True)
    assert ops[b"r"] == first.snapshot_rows > 15_000 and writer.done > 100


def test_a_snapshot_cut_half_way_goes_on_beside_the_changes_since_its_slot(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=2)
    items(dsn, 5_000)
    source = PostgresCdcSource(dsn, {"public.items": topic})

    class Cut(Exception):
        pass

    class Cutting(PostgresCdcSourceJob):  # dies after 2,000 rows, produced and flushed
        def _give_direct(self, writer: Any, chunk: Any, query: Any, conn: Any, described: Any,
                         point: int, first: int, stamp: int) -> bool:  # fmt: skip
            @contextlib.contextmanager
            def copy(query: Any) -> Iterator[Any]:
                with conn.cursor().copy(query) as messages:

                    def some() -> Iterator[Any]:
                        for n, message in enumerate(messages, first):
                            if n == 2000:
                                writer.producer.flush()
                                raise Cut
                            yield message

                    yield some()

            cut = types.SimpleNamespace(cursor=lambda: types.SimpleNamespace(copy=copy))
            return super()._give_direct(writer, chunk, query, cut, described, point, first,
                                        stamp)  # fmt: skip

    cutting = Cutting(source, brokers)
    with pytest.raises(Cut):
        cutting.run_until_caught_up()
    execute(dsn, "UPDATE items SET n = n + 1 WHERE id % 7 = 0", "DELETE FROM items WHERE id < 10")
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.snapshot_rows == 4991  # (read again in a window, beside the changes)
    ops = check_runs(brokers, topic, dsn, reads_twice=True)
    assert ops == {b"r": 2000 + 4991, b"u": 5000 // 7, b"d": 9}  # (the changes since the slot)


def test_the_snapshot_modes(brokers: str, new_topic: Callable[..., str], dsn: str) -> None:
    items(dsn, 100)
    topics = {mode: new_topic() for mode in ("never", "initial_only", "when_needed", "initial")}
    sources = {mode: PostgresCdcSource(dsn, {"public.items": topic}, snapshot=mode)  # type: ignore[arg-type]
               for mode, topic in topics.items()}  # fmt: skip
    for source in sources.values():
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, "UPDATE items SET n = 1 WHERE id <= 10")
    for mode, source in sources.items():
        job = PostgresCdcSourceJob(source, brokers)
        job.run_until_caught_up()
        assert (job.slot_position() is None) == (mode == "initial_only"), mode
    for mode in ("when_needed", "initial"):  # the slot gone: only when_needed reads again
        PostgresCdcSourceJob(sources[mode], brokers).reset()
        PostgresCdcSourceJob(sources[mode], brokers).run_until_caught_up()
    execute(dsn, "UPDATE items SET n = 2 WHERE id <= 5")
    for source in sources.values():
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    ops = {mode: check_runs(brokers, topics[mode], dsn, reads_twice=mode == "when_needed")
           for mode in ("initial", "when_needed")}  # fmt: skip
    never = [dict(r.headers)[OP_HEADER] for r in read_to_end(brokers, topics["never"])]
    assert never == [b"u"] * 15
    assert ops["initial"] == {b"r": 100, b"u": 15}
    assert ops["when_needed"] == {b"r": 200, b"u": 15}
    only = [json.loads(r.value)["n"] for r in read_to_end(brokers, topics["initial_only"])]
    assert only == [0] * 100


def test_incremental_snapshots_asked_for_and_of_an_added_table_read_beside_the_changes(
    brokers: str, new_topic: Callable[..., str], dsn: str, tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from goka import cli

    items, more = new_topic(partitions=2), new_topic(partitions=2)
    execute(dsn, "CREATE TABLE items (id int PRIMARY KEY, n int)",
            "INSERT INTO items SELECT g, 0 FROM generate_series(1, 3000) g",
            "CREATE TABLE more (id int PRIMARY KEY, n int)",
            "INSERT INTO more SELECT g, 0 FROM generate_series(1, 2000) g")  # fmt: skip
    declared = f"PostgresCdcSource({dsn!r}, {{'public.items': {items!r}}}, snapshot_chunk=700)"
    (tmp_path / "cdc_sources.py").write_text(
        f"from goka.connect import PostgresCdcSource\nchanges = {declared}\n")  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    source = PostgresCdcSource(dsn, {"public.items": items}, snapshot_chunk=700)
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().snapshot_rows == 3000
    execute(dsn, "UPDATE items SET n = n + 1 WHERE id % 3 = 0")
    assert cli.main(["connect", "snapshot", "cdc_sources:changes"]) == 0  # (a signal, in order)
    execute(dsn, "UPDATE items SET n = n + 1 WHERE id % 5 = 0", "UPDATE more SET n = 1")
    again = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert again.snapshot_rows == 3000
    grown = PostgresCdcSource(dsn, {"public.items": items, "public.more": more},
                              snapshot_chunk=700)  # fmt: skip
    added = PostgresCdcSourceJob(grown, brokers).run_until_caught_up()
    assert added.snapshot_rows == 2000  # (more's rows, not items' again)
    execute(dsn, "UPDATE more SET n = n + 1 WHERE id <= 10")
    PostgresCdcSourceJob(grown, brokers).run_until_caught_up()
    assert check_runs(brokers, items, dsn, reads_twice=True) == {b"r": 6000, b"u": 1000 + 600}
    assert check_runs(brokers, more, dsn, table="more") == {b"r": 2000, b"u": 10}
    with pytest.raises(ConfigurationError, match="not public.other"):
        PostgresCdcSourceJob(grown, brokers).snapshot(["public.other"])


def test_a_change_inside_a_window_drops_its_row_from_the_chunk(
    brokers: str, new_topic: Callable[..., str], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import goka.connect.postgres_snapshot_steps as steps

    topic = new_topic(partitions=2)
    items(dsn, 500)
    source = PostgresCdcSource(dsn, {"public.items": topic}, snapshot_transaction=0)
    read_chunk = steps.read_chunk

    def and_then_a_change(*args: Any) -> Any:  # (committed after the chunk, before the high mark)
        chunk = read_chunk(*args)
        execute(dsn, "UPDATE items SET n = n + 1 WHERE id IN (3, 499)", "DELETE FROM items "
                "WHERE id = 7", "UPDATE items SET id = 1000 WHERE id = 9")  # fmt: skip
        return chunk

    monkeypatch.setattr(steps, "read_chunk", and_then_a_change)
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.snapshot_rows == 500 - 4  # (3, 499, 7 and 9: their changes tell them)
    assert check_runs(brokers, topic, dsn, reads_twice=True) == {b"r": 496, b"u": 3, b"d": 2}


def test_a_truncate_inside_a_window_drops_the_chunk(
    brokers: str, new_topic: Callable[..., str], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import goka.connect.postgres_snapshot_steps as steps

    topic = new_topic(partitions=2)
    items(dsn, 300)
    source = PostgresCdcSource(dsn, {"public.items": topic}, snapshot_transaction=0)
    read_chunk, mark = steps.read_chunk, steps.Window.mark
    truncating = threading.Thread(target=execute, args=(
        dsn, "TRUNCATE items", "INSERT INTO items VALUES (5, 0), (1000, 0)"))  # fmt: skip

    def and_then_a_truncate(*args: Any) -> Any:  # (it waits for the chunk's transaction)
        chunk = read_chunk(*args)
        truncating.start()
        return chunk

    def after_the_truncate(window: Any, slot: str, which: str) -> str:  # (the high mark)
        if which == "high":
            truncating.join()
        return mark(window, slot, which)

    monkeypatch.setattr(steps, "read_chunk", and_then_a_truncate)
    monkeypatch.setattr(steps.Window, "mark", after_the_truncate)
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.snapshot_rows == 0  # (its 300 rows are gone: none is read)
    assert check_runs(brokers, topic, dsn, reads_twice=True) == {b"t": 2, b"c": 2}


def test_a_row_in_the_signal_table_asks_for_an_incremental_snapshot(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=2)
    items(dsn, 300)
    source = PostgresCdcSource(dsn, {"public.items": topic}, signal_table="public.signals")
    with pytest.raises(SourceError, match="signal table public.signals does not exist"):
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, "CREATE TABLE signals (id text PRIMARY KEY, type text NOT NULL, data text)")
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().snapshot_rows == 300
    execute(dsn, "UPDATE items SET n = 1 WHERE id <= 10",
            "INSERT INTO signals VALUES ('again', 'execute-snapshot', "
            """'{"data-collections": ["public\\\\.it.*"], "type": "incremental"}'), """
            "('pause', 'pause-snapshot', NULL), ('elsewhere', 'execute-snapshot', "
            """'{"data-collections": ["public.nothing"]}')""",
            "UPDATE items SET n = 2 WHERE id <= 5")  # fmt: skip
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.snapshot_rows == 300  # (read again, in chunks beside the changes)
    assert len(totals.errors) == 2, totals.errors
    assert "signal 'pause': type 'pause-snapshot'" in totals.errors[0]
    assert "'public.nothing' is none of the source's tables" in totals.errors[1]
    assert check_runs(brokers, topic, dsn, reads_twice=True) == {b"r": 600, b"u": 15}


@pytest.mark.parametrize("restart", [False, True])
def test_a_chunk_waits_for_a_transaction_given_but_not_yet_visible(
    brokers: str, new_topic: Callable[..., str], dsn: str, postgres_server: Any,
    caplog: pytest.LogCaptureFixture, restart: bool,
) -> None:  # fmt: skip
    # A commit waiting for a synchronous standby is in the WAL (its change is streamed) but
    # not visible: a chunk read then would hold the row's older version, given after it.
    # (restart: the change given by a run that stopped before its window.)
    caplog.set_level(logging.INFO, logger="goka.connect.postgres_snapshot_steps")
    topic = new_topic(partitions=2)
    items(dsn, 100)
    source = PostgresCdcSource(dsn, {"public.items": topic}, snapshot="never")
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    standby = "ALTER SYSTEM {} synchronous_standby_names{}"
    execute(postgres_server.dsn, standby.format("SET", " = 'nobody'"), "SELECT pg_reload_conf()")
    runs: list[Any] = []
    try:  # (a session started once the server has read the setting waits at its commits)
        wait_for(lambda: setting(dsn, "synchronous_standby_names") == "nobody")
        waiting = threading.Thread(target=execute, args=(dsn, "UPDATE items SET n = 1 "
                                                              "WHERE id = 5"))  # fmt: skip
        waiting.start()
        wait_for(lambda: waiting_commits(dsn) == 1, what="a commit waiting for the standby")
        PostgresCdcSourceJob(source, brokers).snapshot(["public.items"])
        if restart:

            class Stopped(Exception):
                pass

            class Stopping(PostgresCdcSourceJob):  # (the update and the signal given first)
                def _open_window(self) -> None:
                    raise Stopped

            with pytest.raises(Stopped):
                Stopping(source, brokers).run_until_caught_up()
        job = PostgresCdcSourceJob(source, brokers)
        running = threading.Thread(target=lambda: runs.append(job.run_until_caught_up()))
        running.start()
        wait_for(lambda: "not yet visible" in caplog.text or runs, what="the chunk waiting")
    finally:
        execute(postgres_server.dsn, standby.format("RESET", ""), "SELECT pg_reload_conf()")
    waiting.join(30)
    running.join(60)
    assert runs and runs[0].snapshot_rows == 100
    assert check_runs(brokers, topic, dsn, reads_twice=True) == {b"r": 100, b"u": 1}


def setting(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]


def waiting_commits(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE wait_event = 'SyncRep'").fetchone()[0]  # fmt: skip


@pytest.mark.parametrize("windows", [False, True])
def test_a_snapshot_reads_the_rows_and_columns_its_publication_publishes(
    brokers: str, new_topic: Callable[..., str], dsn: str, windows: bool
) -> None:
    topic = new_topic(partitions=2)
    execute(dsn, "CREATE TABLE items (id int PRIMARY KEY, n int, secret text)",
            "INSERT INTO items SELECT g, 0, 'x' FROM generate_series(1, 200) g",
            "CREATE PUBLICATION part FOR TABLE items (id, n) WHERE (id % 4 = 0)")  # fmt: skip
    source = PostgresCdcSource(dsn, {"public.items": topic}, publication="part",
                               snapshot_transaction=0 if windows else 600,
                               snapshot_chunk=30)  # fmt: skip
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().snapshot_rows == 50
    execute(dsn, "UPDATE items SET n = 1 WHERE id <= 20")
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    records = [(r.key, json.loads(r.value or b"null"), dict(r.headers)[OP_HEADER])
               for r in read_to_end(brokers, topic)]  # fmt: skip
    assert all(value == {"id": int(key or 0), "n": value["n"]} for key, value, _ in records)
    assert sorted(int(key or 0) for key, _, op in records if op == b"r") == list(range(4, 201, 4))
    assert sorted(int(key or 0) for key, _, op in records if op == b"u") == [4, 8, 12, 16, 20]
