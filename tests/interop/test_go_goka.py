"""goka-py beside real Go Goka (lovoo/goka, tests/interop/go) on Apache Kafka: each side's
emitters, processor groups and views on the other's topics, with keys of any bytes and nil
values. Expected counts are computed here from what was sent, not read from either side."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import (
    Context,
    Emitter,
    Int64Codec,
    JsonCodec,
    StringCodec,
    define_group,
    input,
    join,
    key_bytes,
    lookup,
    loop,
    persist,
)
from goka.grpc import ViewClient, ViewServer
from goka.topic_manager import TopicManager
from goka.view import View

from ..helpers import wait_for
from .gogoka import GoGoka

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: Keys Go Goka may write: text, the empty key, non-UTF-8 bytes, a NUL inside.
KEYS: list[bytes] = [b"alice", b"", "Zo\u00eb".encode(), b"\xff\xfe\x00raw", b"bob", b"\x80"]


def _records(n: int, seed: int) -> list[tuple[bytes, bytes | None]]:
    """``n`` clicks over KEYS, every seventh a nil value (which Goka's groups ignore)."""
    rng = random.Random(seed)
    return [(rng.choice(KEYS), None if i % 7 == 3 else b"/page") for i in range(n)]


def _expected(records: list[tuple[bytes, bytes | None]]) -> Counter[bytes]:
    return Counter(k for k, v in records if v is not None)


def _int64(values: dict[bytes, bytes]) -> dict[bytes, int]:
    return {k: int(v) for k, v in values.items()}  # Goka's Int64 codec: decimal text


def count(ctx: Context[int], msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def test_python_emits_go_counts_python_and_go_views_read_it(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, tmp_path: Path
) -> None:
    topic, group = new_topic(partitions=4), f"{new_topic()}-go"
    records = _records(600, seed=1)
    with Emitter(brokers, topic, StringCodec()) as emitter:
        for key, value in records:
            emitter.emit(key, None if value is None else value.decode())
    expected = _expected(records)
    with go_goka.count(brokers, group, topic):
        view = View(brokers, f"{group}-table", Int64Codec(), path=tmp_path / "view").start()
        try:
            view.wait_recovered(60)
            wait_for_counts(view, sum(expected.values()))
            assert {key_bytes(k): v for k, v in view.items()} == expected
            with ViewServer([view]) as server, ViewClient(server.address) as client:
                assert (
                    client.get(f"{group}-table", b"\xff\xfe\x00raw") == expected[b"\xff\xfe\x00raw"]
                )
                assert client.get(f"{group}-table", b"") == expected[b""]
        finally:
            view.close()
    assert _int64(go_goka.view(brokers, f"{group}-table")) == expected


@pytest.mark.spark
def test_go_emits_python_counts_go_view_reads_it(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    topic = new_topic(partitions=4)
    records = _records(500, seed=2)
    go_goka.emit(brokers, topic, records)
    graph = define_group(f"{topic}-py", input(topic, StringCodec(), count), persist(Int64Codec()))
    run = make_processor(graph).run_until_caught_up(timeout=300)
    assert run.processed == len(records)  # nil values count as processed, not as clicks
    assert _int64(go_goka.view(brokers, graph.table)) == _expected(records)


def wait_for_counts(view: View[int], total: int) -> None:
    """Until the view's counts add up to ``total`` (what the group has to count)."""
    wait_for(lambda: sum(v for _, v in view.items()) >= total, timeout=120,
             what=f"the Go group's table to count {total} clicks")  # fmt: skip


def test_topics_made_by_go_goka_are_what_goka_py_expects(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka
) -> None:
    """A table Go Goka's group created (on first start) passes goka-py's checks."""
    topic, group = new_topic(partitions=2), f"{new_topic()}-made-by-go"
    go_goka.emit(brokers, topic, [(b"k", b"v")])
    with go_goka.count(brokers, group, topic):
        pass
    assert TopicManager(brokers).ensure_table_exists(f"{group}-table", 2) == 2


@pytest.mark.spark
def test_a_group_handed_from_go_to_python_and_back_counts_each_record_once(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    """Go Goka runs the group, stops; goka-py takes it over from the offsets Go committed and
    the table Go wrote; Go takes it back from goka-py's. No step in between."""
    topic = new_topic(partitions=4)
    group = f"{topic}-handed"
    graph = define_group(group, input(topic, StringCodec(), count), persist(Int64Codec()))
    sent: list[tuple[bytes, bytes | None]] = []
    for seed, side in ((3, "go"), (4, "python"), (5, "go")):
        part = _records(300, seed)
        go_goka.emit(brokers, topic, part)
        sent += part
        if side == "go":
            with go_goka.count(brokers, group, topic):
                _wait_table(brokers, graph.table, _expected(sent), go_goka)
        else:
            run = make_processor(graph).run_until_caught_up(timeout=300)
            assert run.processed == len(part)  # only what Go had not committed
        assert _int64(go_goka.view(brokers, graph.table)) == _expected(sent), side


def _wait_table(brokers: str, table: str, expected: Counter[bytes], go_goka: GoGoka) -> None:
    wait_for(lambda: _int64(go_goka.view(brokers, table)) == expected, timeout=120,
             what="Go Goka's group to count what was sent")  # fmt: skip


def _sums(clicks: list[tuple[bytes, bytes | None]], table: Counter[bytes]) -> dict[bytes, int]:
    """Per key of ``clicks`` (nil values ignored), the sum of the key's value in ``table``."""
    found: dict[bytes, int] = {}
    for key, value in clicks:
        if value is not None:
            found[key] = found.get(key, 0) + table.get(key, 0)
    return found


@pytest.mark.spark
@pytest.mark.parametrize("edge", ["join", "lookup"])
def test_each_side_joins_and_looks_up_the_other_sides_table(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any, edge: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    counted, clicks = new_topic(partitions=4), new_topic(partitions=4)
    first, second = _records(400, seed=6), _records(300, seed=7)
    go_goka.emit(brokers, counted, first)
    go_goka.emit(brokers, clicks, second)
    expected = _sums(second, _expected(first))
    # a Python group's table, joined (looked up) by a Go group
    python_counts = define_group(f"{counted}-py", input(counted, StringCodec(), count),
                                 persist(Int64Codec()))  # fmt: skip
    make_processor(python_counts, checkpoint_dir=tmp_path / "counts").run_until_caught_up(
        timeout=300
    )
    go_sums = f"{clicks}-go-{edge}"
    with go_goka.sum(brokers, go_sums, clicks, python_counts.table, edge):
        _wait_table(brokers, f"{go_sums}-table", Counter(expected), go_goka)
    # a Go group's table, joined (looked up) by a Python group
    go_counts = f"{counted}-go"
    with go_goka.count(brokers, go_counts, counted):
        _wait_table(brokers, f"{go_counts}-table", _expected(first), go_goka)
    table = f"{go_counts}-table"

    def add(ctx: Context[int], msg: Any) -> None:
        found = ctx.join(table) if edge == "join" else ctx.lookup(table, ctx.key)
        ctx.set_value((ctx.value() or 0) + (found or 0))

    other = join(table, Int64Codec()) if edge == "join" else lookup(table, Int64Codec())
    python_sums = define_group(f"{clicks}-py-{edge}", input(clicks, StringCodec(), add), other,
                               persist(Int64Codec()))  # fmt: skip
    make_processor(python_sums, checkpoint_dir=tmp_path / "sums").run_until_caught_up(timeout=300)
    assert _int64(go_goka.view(brokers, python_sums.table)) == expected


PAGES = ["/home", "/about", "/Zo\u00eb", ""]


@pytest.mark.spark
def test_the_loop_topic_carries_a_group_from_go_to_python_and_back(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    """Records looped back by Go Goka into ``<group>-loop`` (and not yet read when it
    stopped) are read by goka-py, and the reverse: counts per page exact."""
    topic = new_topic(partitions=4)
    group = f"{topic}-pages"

    def to_page(ctx: Context[int], page: str) -> None:
        ctx.loopback(page, ctx.key)

    graph = define_group(group, input(topic, StringCodec(), to_page),
                         loop(StringCodec(), count), persist(Int64Codec()))  # fmt: skip
    rng, sent = random.Random(8), Counter[bytes]()
    for side in ("go", "python", "go"):
        part = [(rng.choice(KEYS), rng.choice(PAGES).encode()) for _ in range(300)]
        go_goka.emit(brokers, topic, part)
        sent.update(page for _, page in part)
        if side == "go":
            with go_goka.pages(brokers, group, topic):
                _wait_table(brokers, graph.table, sent, go_goka)
        else:
            make_processor(graph).run_until_caught_up(timeout=300)
        assert _int64(go_goka.view(brokers, graph.table)) == sent, side


@pytest.mark.spark
def test_json_written_by_go_is_read_by_goka_py(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    """Values a Go team's encoding/json codec wrote, decoded by goka-py's JsonCodec."""
    topic = new_topic(partitions=2)
    rng = random.Random(9)
    values = [{"n": rng.randrange(100), "page": rng.choice(PAGES), "tags": ["a", None]}
              for _ in range(200)]  # fmt: skip
    records = [(rng.choice(KEYS), json.dumps(v).encode()) for v in values]
    go_goka.emit(brokers, topic, records, codec="json")

    def add(ctx: Context[int], msg: dict[str, Any]) -> None:
        assert msg["page"] in PAGES and msg["tags"] == ["a", None]
        ctx.set_value((ctx.value() or 0) + msg["n"])

    graph = define_group(f"{topic}-json", input(topic, JsonCodec(), add), persist(Int64Codec()))
    run = make_processor(graph).run_until_caught_up(timeout=300)
    assert run.processed == len(records) and run.failed == 0
    expected: Counter[bytes] = Counter()
    for (key, _), value in zip(records, values, strict=True):
        expected[key] += value["n"]
    assert _int64(go_goka.view(brokers, graph.table)) == expected


@pytest.mark.spark
def test_json_goka_py_writes_is_read_by_go_goka(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    """A goka-py table in JsonCodec (nested values, nulls, non-ASCII, floats), read by a Go
    view through encoding/json: every key's value is the one goka-py kept. (Integers beyond
    2**53 are left out: encoding/json decodes numbers into float64, docs/interop.md.)"""
    topic = new_topic(partitions=2)
    rng = random.Random(12)
    records = [(rng.choice(KEYS), f"{rng.choice(PAGES)} {rng.randrange(10)}".encode())
               for _ in range(300)]  # fmt: skip
    go_goka.emit(brokers, topic, records)
    graph = define_group(f"{topic}-js", input(topic, StringCodec(), visits),
                         persist(JsonCodec()))  # fmt: skip
    make_processor(graph).run_until_caught_up(timeout=300)
    expected: dict[bytes, Any] = {}
    for key, value in records:
        expected[key] = _visited(expected.get(key), value.decode())
    found = {k: json.loads(v) for k, v in go_goka.view(brokers, graph.table, codec="json").items()}
    assert found == expected and len(found) > 3


def _visited(state: dict[str, Any] | None, msg: str) -> dict[str, Any]:
    """The JSON a key keeps: its pages' counts (a nested object), the last odd number seen
    (null until one is), a float, text that is not ASCII, and a list holding a null."""
    page, n = msg.rsplit(" ", 1)
    state = state or {"pages": {}, "last": None, "ratio": 0.5, "name": "Zo\u00eb", "no": [None]}
    state["pages"][page] = state["pages"].get(page, 0) + 1
    if int(n) % 2:
        state["last"] = int(n)
    state["ratio"] = state["ratio"] / 2
    return state


def visits(ctx: Context[dict[str, Any]], msg: str) -> None:
    ctx.set_value(_visited(ctx.value(), msg))


@pytest.mark.spark
def test_keys_goka_py_deletes_are_gone_from_a_go_view(
    brokers: str, new_topic: Callable[..., str], go_goka: GoGoka, make_processor: Any
) -> None:
    """``ctx.delete()`` writes a tombstone: Go Goka's view drops the key, as Go's own would."""
    topic = new_topic(partitions=4)
    rng = random.Random(10)
    records = [(rng.choice(KEYS), rng.choice([b"/page"] * 5 + [b"delete"])) for _ in range(400)]
    go_goka.emit(brokers, topic, records)

    def count_or_delete(ctx: Context[int], msg: str) -> None:
        if msg == "delete":
            ctx.delete()
        else:
            ctx.set_value((ctx.value() or 0) + 1)

    graph = define_group(f"{topic}-del", input(topic, StringCodec(), count_or_delete),
                         persist(Int64Codec()))  # fmt: skip
    make_processor(graph).run_until_caught_up(timeout=300)
    expected: dict[bytes, int] = {}
    for key, value in records:  # a key's records are in order in its partition
        if value == b"delete":
            expected.pop(key, None)
        else:
            expected[key] = expected.get(key, 0) + 1
    assert set(expected) < set(KEYS)  # some keys end deleted
    assert _int64(go_goka.view(brokers, graph.table)) == expected
