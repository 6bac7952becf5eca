"""Views against the embedded broker, with real LevelDB storage."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from goka import Int64Codec, JsonCodec, StringCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.view import View, ViewError, ViewNotReadyError, ViewState

from ..helpers import produce, wait_for
from .proxy import TcpProxy
from .rewinds import gone, without

pytestmark = pytest.mark.kafka


def test_recovers_100k_records_into_leveldb(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    table = new_topic(partitions=4, table=True)
    produce(brokers, table, Int64Codec(), ((f"user-{i}", i) for i in range(100_000)))
    with View(brokers, table, Int64Codec(), path=tmp_path / "view") as view:
        view.wait_recovered(60)
        stats = view.stats()
        assert (stats.state, stats.recovered, stats.applied) == (ViewState.RUNNING, True, 100_000)
        assert stats.lag == 0 and sum(p.offset for p in stats.partitions.values()) == 100_000
        assert view.get("user-0") == 0 and view.get("user-99999") == 99_999
        assert view.get("user-100000") is None
        assert sum(1 for _ in view.items()) == 100_000


@pytest.mark.smoke
def test_restart_resumes_from_stored_offsets(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    table = new_topic(partitions=3, table=True)
    produce(brokers, table, StringCodec(), ((f"k{i}", "v1") for i in range(5_000)))
    with View(brokers, table, StringCodec(), path=tmp_path / "v") as view:
        view.wait_recovered(30)
        assert view.stats().applied == 5_000
    with View(brokers, table, StringCodec(), path=tmp_path / "v") as view:
        view.wait_recovered(30)
        assert view.stats().applied == 0  # nothing re-read
        assert view.get("k4999") == "v1"
    produce(brokers, table, StringCodec(), ((f"k{i}", "v2") for i in range(100)))
    with View(brokers, table, StringCodec(), path=tmp_path / "v") as view:
        view.wait_recovered(30)
        assert view.stats().applied == 100  # only what was written while it was down
        assert (view.get("k0"), view.get("k100")) == ("v2", "v1")


@pytest.mark.smoke
def test_tombstones_delete_keys(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    table = new_topic(partitions=2, table=True)
    produce(brokers, table, JsonCodec(), [("a", {"n": 1}), ("b", {"n": 2}), ("a", None)])
    with View(brokers, table, JsonCodec(), path=tmp_path / "v") as view:
        view.wait_recovered(30)
        assert not view.has("a") and view.get("a") is None
        assert view.get("b") == {"n": 2}
        assert dict(view.items()) == {"b": {"n": 2}}


def test_reads_are_refused_before_recovery_unless_stale_reads_are_allowed(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    table = new_topic(partitions=1, table=True)
    produce(brokers, table, StringCodec(), [("k", "v")])
    view = View(brokers, table, StringCodec())  # not started: idle, not recovered
    with pytest.raises(
        ViewNotReadyError, match=f"view '{table}' has not recovered yet .state: idle."
    ):
        view.get("k")
    with pytest.raises(ViewNotReadyError):
        list(view.items())
    stale = View(brokers, table, StringCodec(), allow_stale_reads=True)
    assert stale.get("k") is None  # allowed, and (not having read anything) stale
    view.close()
    stale.close()
    with pytest.raises(ViewNotReadyError, match="is closed"):
        view.get("k")


def test_states_are_observable_by_callback_and_property(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    table = new_topic(partitions=2, table=True)
    produce(brokers, table, StringCodec(), [("k", "v")])
    changes: list[tuple[ViewState, ViewState]] = []
    view = View(
        brokers, table, StringCodec(), on_state_change=lambda old, new: changes.append((old, new))
    )
    assert view.state is ViewState.IDLE
    with view:
        view.wait_recovered(30)
        assert view.state is ViewState.RUNNING
    assert changes == [
        (ViewState.IDLE, ViewState.CATCHING_UP),
        (ViewState.CATCHING_UP, ViewState.RUNNING),
        (ViewState.RUNNING, ViewState.CLOSED),
    ]


def test_keeps_up_while_a_producer_writes(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    table = new_topic(partitions=4, table=True)
    with View(brokers, table, Int64Codec(), path=tmp_path / "v") as view:
        view.wait_recovered(30)

        def items() -> Iterator[tuple[str, int]]:
            for i in range(20_000):
                if i == 10_000:  # the writer goes on only once the view follows the first half
                    wait_for(lambda: view.stats().applied > 0, what="records while writing")
                yield f"k{i % 500}", i

        produce(brokers, table, Int64Codec(), items())
        wait_for(lambda: view.stats().applied == 20_000, what="all records")
        assert all(view.get(f"k{k}") == 19_500 + k for k in range(500))


def test_range_and_prefix_reads(brokers: str, new_topic: Callable[..., str]) -> None:
    table = new_topic(partitions=2, table=True)
    produce(brokers, table, StringCodec(), [(k, k.upper()) for k in ["a1", "a2", "a3", "b1", "c1"]])
    with View(brokers, table, StringCodec()) as view:
        view.wait_recovered(30)
        assert [k for k, _ in view.items(prefix="a")] == ["a1", "a2", "a3"]
        assert list(view.items(start="a2", stop="b2")) == [("a2", "A2"), ("a3", "A3"), ("b1", "B1")]
        assert [k for k, _ in view.items(reverse=True, limit=2)] == ["c1", "b1"]


def test_several_views_in_one_process(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    a, b = new_topic(partitions=2, table=True), new_topic(partitions=3, table=True)
    produce(brokers, a, StringCodec(), [("k", "from a")])
    produce(brokers, b, Int64Codec(), [("k", 7)])
    with View(brokers, a, StringCodec(), path=tmp_path / "a") as va, \
         View(brokers, b, Int64Codec(), path=tmp_path / "b") as vb:  # fmt: skip
        va.wait_recovered(30)
        vb.wait_recovered(30)
        assert (va.get("k"), vb.get("k")) == ("from a", 7)


def test_a_storage_of_another_table_is_refused(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    a, b = new_topic(partitions=1, table=True), new_topic(partitions=1, table=True)
    View(brokers, a, StringCodec(), path=tmp_path / "v").close()
    with pytest.raises(Exception, match=f"holds table '{a}', not '{b}'"):
        View(brokers, b, StringCodec(), path=tmp_path / "v")


def test_missing_table_topic_fails_with_a_clear_error(brokers: str) -> None:
    view = View(brokers, "no-such-table", StringCodec()).start()
    with pytest.raises(Exception, match="table topic 'no-such-table' does not exist"):
        view.wait_recovered(30)
    assert view.state is ViewState.FAILED
    view.close()


def test_network_outage_reconnects_and_catches_up(
    tmp_path: Path, make_broker: Callable[..., EmbeddedBroker]
) -> None:
    """Clients reach the broker through a proxy (its advertised address); cutting it is an
    outage. Records written before and after the outage all arrive."""
    placeholder = TcpProxy(("127.0.0.1", 1)).start()
    port = placeholder.port
    placeholder.cut()
    with make_broker(advertised=f"127.0.0.1:{port}") as broker:
        proxy = TcpProxy(("127.0.0.1", broker.port), port=port).start()
        via_proxy = f"127.0.0.1:{port}"
        TopicManager(via_proxy).ensure_table_exists("outage-table", 2)
        produce(via_proxy, "outage-table", StringCodec(), [("k1", "1")])
        states: list[ViewState] = []
        view = View(via_proxy, "outage-table", StringCodec(), path=tmp_path / "v",
                    on_state_change=lambda old, new: states.append(new),
                    **{"reconnect.backoff.max.ms": 200})  # fmt: skip
        with view:
            view.wait_recovered(30)
            proxy.cut()
            wait_for(lambda: view.state is ViewState.RECONNECTING, what="reconnecting")
            assert view.get("k1") == "1"  # reads go on from local storage during the outage
            proxy = TcpProxy(("127.0.0.1", broker.port), port=port).start()
            wait_for(lambda: view.state is ViewState.RUNNING, what="running again")
            produce(via_proxy, "outage-table", StringCodec(), [("k2", "2")])
            wait_for(lambda: view.get("k2") == "2", what="a record written after the outage")
        proxy.cut()
    assert states[:4] == [
        ViewState.CATCHING_UP,
        ViewState.RUNNING,
        ViewState.RECONNECTING,
        ViewState.RUNNING,
    ]


@pytest.mark.smoke
def test_a_table_that_came_back_shorter_fails_the_view_clearly(
    tmp_path: Path, kafka_broker: EmbeddedBroker, make_broker: Callable[..., EmbeddedBroker]
) -> None:
    with contextlib.nullcontext(without(kafka_broker, make_broker, "lost-table")) as broker:
        TopicManager(broker.bootstrap).ensure_table_exists("lost-table", 1)
        produce(broker.bootstrap, "lost-table", StringCodec(), [(f"k{i}", "v") for i in range(10)])
        view = View(broker.bootstrap, "lost-table", StringCodec(), path=tmp_path / "v").start()
        view.wait_recovered(30)
        if broker.kind == "tansu":  # the broker replaced without its data
            broker.stop()
            wait_for(lambda: view.state is ViewState.RECONNECTING, what="reconnecting")
        gone(broker, "lost-table")
        TopicManager(broker.bootstrap).ensure_table_exists("lost-table", 1)
        produce(broker.bootstrap, "lost-table", StringCodec(), [("new", "v")])
        wait_for(lambda: view.state is ViewState.FAILED, what="the view to fail")
        with pytest.raises(
            ViewError,
            # (0: the view met the topic made anew before its record came; both are true)
            match=r"ends at offset [01], before the view's offset 10: the topic was truncated or recreated",
        ):
            view.wait_recovered(0)
        view.close()
