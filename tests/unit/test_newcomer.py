"""The traps a newcomer and an operator met (issue 68), each closed: one state layout whatever
the number of groups, every setting checked where it is declared with the name the user wrote,
CLI errors of one line with the flag and the port, codec classes and strings refused, the
tester's conflicting codecs and unknown groups refused, librdkafka's start-up noise kept out.
No broker and no Spark session: these run in seconds."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goka import (
    AvroCodec,
    BytesCodec,
    Context,
    Int64Codec,
    JsonCodec,
    StringCodec,
    Tumbling,
    define_group,
    input,
    inputs,
    persist,
    window,
)
from goka.cli import main
from goka.errors import ConfigurationError, GraphError
from goka.processing.settings import ProcessorSettings
from goka.tester import Tester
from goka.web.http import HttpService


def count(ctx: Context[int], msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


@pytest.fixture
def goka(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., tuple[int, str]]]:
    """Run the ``goka`` command in this process: its exit code and what it printed to stderr
    (the handlers of SIGINT and SIGTERM it installs are put back)."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit:
            code = int(exit.code or 0)
        return code, capsys.readouterr().err

    yield run
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def one_line(err: str) -> str:
    """The one error line of ``err`` (logs aside; a hint may follow it)."""
    said = [line for line in err.splitlines()
            if line.startswith("goka:") and not line.startswith("goka: warning:")]  # fmt: skip
    assert len(said) in (1, 2) and said[0].startswith("goka: error: "), err
    assert "Traceback" not in err, err
    return said[0]


# -- one state layout ---------------------------------------------------------------------------


@pytest.mark.parametrize("graphs", [["a"], ["a", "b"]], ids=["one group", "two groups"])
def test_a_group_keeps_its_state_in_one_place_however_many_groups_run(
    graphs: list[str], tmp_path: Path
) -> None:
    from goka.commands.processor import _dirs

    groups = {g: [f"{g}-in"] for g in graphs}
    args = argparse.Namespace(state_dir=str(tmp_path / "state"),
                              checkpoint_dir="<state-dir>/<group>/checkpoint")  # fmt: skip
    assert _dirs(args, "a", groups) == (str(tmp_path / "state"), None)
    args.checkpoint_dir = str(tmp_path / "checkpoints")
    assert _dirs(args, "a", groups) == (str(tmp_path / "state"), f"{tmp_path}/checkpoints/a")


def store(path: Path) -> Path:
    """A directory that looks like a LevelDB store."""
    path.mkdir(parents=True)
    (path / "CURRENT").write_text(path.name)
    return path


def test_stores_of_the_nested_layout_move_up_once_and_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from goka.processing.layout import move_nested

    nested = tmp_path / "clicks" / "clicks"
    for name in ("partition-0", "partition-1", "join-users-0"):
        store(nested / name)
    (nested / "partition-0.writer").write_text("w")
    (nested / "checkpoint" / "offsets").mkdir(parents=True)
    (nested / "notes.txt").write_text("mine")  # (not the layout's: stays)
    store(tmp_path / "clicks" / "partition-1")  # (a newer store of that name stays)
    with caplog.at_level(logging.WARNING, "goka.processing.layout"):
        moved = move_nested(tmp_path, "clicks")
    assert moved == ["checkpoint", "join-users-0", "partition-0", "partition-0.writer"]
    assert (tmp_path / "clicks" / "partition-0" / "CURRENT").read_text() == "partition-0"
    assert sorted(p.name for p in nested.iterdir()) == ["notes.txt", "partition-1"]
    assert "left in" in caplog.text and "notes.txt, partition-1" in caplog.text
    assert move_nested(tmp_path, "clicks") == []  # once a process


@pytest.mark.parametrize("group", ["checkpoint", "partition-0", "wordcount"])
def test_what_only_looks_nested_stays(group: str, tmp_path: Path) -> None:
    """A group named ``checkpoint`` (its own checkpoint is ``checkpoint/checkpoint``), one named
    ``partition-0`` (its store ``partition-0/partition-0``), a project's package under
    ``--state-dir .``: no store of the nested layout in them, nothing moves."""
    from goka.processing.layout import move_nested

    nested = tmp_path / group / group
    (nested / "offsets").mkdir(parents=True)
    (nested / "metadata").write_text("{}")
    (nested / "CURRENT").write_text("x")
    (nested / "__init__.py").write_text("")
    assert move_nested(tmp_path, group) == []
    assert sorted(p.name for p in nested.iterdir()) == ["CURRENT", "__init__.py", "metadata",
                                                       "offsets"]  # fmt: skip


def flat_checkpoint(root: Path, topics: list[str]) -> None:
    """A checkpoint as Spark leaves it, its newest offsets naming ``topics``."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id": "q"}')
    (root / "goka-partitions").write_text("")
    for batch, offset in ((0, 5), (1, 9)):  # (a continuous query's offsets name its epoch)
        sources = json.dumps({**{t: {"0": offset} for t in topics}, "~epoch": {"n": batch}})
        (root / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{sources}\n")


def test_a_checkpoint_given_as_the_directory_itself_moves_to_its_group(tmp_path: Path) -> None:
    from goka.processing.layout import move_flat_checkpoint

    root = tmp_path / "checkpoints"
    flat_checkpoint(root, ["b-in", "b-ticks"])
    (root / "c" / "offsets").mkdir(parents=True)  # (another group's, new layout: stays)
    (root / "c" / "metadata").write_text("{}")
    groups = {"a": ["a-in"], "b": ["b-in", "b-ticks"], "c": ["c-in"]}
    assert move_flat_checkpoint(str(root), groups) == "b"
    assert sorted(p.name for p in root.iterdir()) == ["b", "c"]
    assert (root / "b" / "metadata").read_text() == '{"id": "q"}'
    assert sorted(p.name for p in (root / "b").iterdir()) == ["commits", "goka-partitions",
                                                              "metadata", "offsets"]  # fmt: skip
    assert (root / "c" / "metadata").is_file()
    assert move_flat_checkpoint(str(root), groups) is None


def test_a_move_cut_short_by_a_crash_is_finished_at_the_next_start(tmp_path: Path) -> None:
    """Killed between two renames: some entries in ``.b.moving``, the rest still at the top
    (``metadata`` among them). The next start moves the rest and ends the move."""
    from goka.processing.layout import move_flat_checkpoint

    root = tmp_path / "checkpoints"
    flat_checkpoint(root, ["b-in"])
    (root / ".b.moving").mkdir()
    for name in ("commits", "goka-partitions"):
        (root / name).rename(root / ".b.moving" / name)
    assert move_flat_checkpoint(str(root), {"b": ["b-in"]}) == "b"
    assert sorted(p.name for p in root.iterdir()) == ["b"]
    assert sorted(p.name for p in (root / "b").iterdir()) == ["commits", "goka-partitions",
                                                              "metadata", "offsets"]  # fmt: skip


def test_a_checkpoint_of_another_group_or_of_no_telling_is_left(tmp_path: Path) -> None:
    from goka.processing.layout import move_flat_checkpoint

    root = tmp_path / "checkpoints"
    flat_checkpoint(root, ["g1-in"])  # g1 ran alone; g2 is deployed beside it
    assert move_flat_checkpoint(str(root), {"g2": ["g2-in"]}) is None
    assert move_flat_checkpoint(str(root), {"g3": ["g1-in", "g3-loop"]}) is None  # (reads more)
    assert (root / "metadata").is_file() and not (root / "g2").exists()
    (root / "state" / "g1").mkdir(parents=True)  # (its snapshots name it)
    assert move_flat_checkpoint(str(root), {"g4": ["g1-in"]}) is None
    assert move_flat_checkpoint(f"file://{root}", {"g1": ["other"]}) == "g1"
    unread = tmp_path / "unread"
    unread.mkdir()
    (unread / "metadata").write_text("{}")  # (no offsets: whose?)
    with pytest.raises(ConfigurationError, match="move its entries"):
        move_flat_checkpoint(str(unread), {"g1": ["g1-in"]})


def test_a_checkpoint_on_shared_storage_is_refused_rather_than_left(tmp_path: Path) -> None:
    import fsspec

    from goka.processing.layout import move_flat_checkpoint

    memory = fsspec.filesystem("memory")
    memory.pipe("/flat/metadata", b"{}")
    with pytest.raises(ConfigurationError, match=r"memory://flat holds a Spark checkpoint"):
        move_flat_checkpoint("memory://flat", {"g": ["in"]})
    assert move_flat_checkpoint("memory://parent", {"g": ["in"]}) is None


# -- settings checked at declaration, named as given ---------------------------------------------


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"trigger": "often"}, "trigger must be a duration"),
        ({"trigger": "-1 second"}, "got '-1 second'"),
        ({"trigger": "1.5 minutes"}, "got '1.5 minutes'"),
        ({"log_level": "VERBOSE"}, "log_level must be one of DEBUG"),
        ({"kafka_config": {"no.such.setting": 1}}, 'kafka_config: No such configuration property: "no.such.setting"'),
        ({"kafka_config": {"consumer.fetch.wait.max.ms": "soon"}}, "kafka_config: Invalid value"),
        ({"producer_config": {"acks": "bogus"}}, "producer_config: Invalid value"),
        ({"tick_interval": "1s"}, "tick_interval must be a number of seconds, got '1s'"),
        ({"epoch": float("nan")}, "epoch must be a number of seconds"),
        ({"mode": "continuous", "trigger": "5 seconds"}, "applies to micro-batches"),
    ],
)  # fmt: skip
def test_bad_settings_fail_at_declaration_naming_the_keyword(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        ProcessorSettings(**settings)
    assert named in str(raised.value)


def test_good_triggers_and_masters_pass() -> None:
    from goka.processing.values import check_master, trigger_seconds

    assert trigger_seconds("1 minute 30 seconds") == 90.0
    assert trigger_seconds("0.5 seconds") == 0.5 and trigger_seconds("200 Milliseconds") == 0.2
    ProcessorSettings(trigger="available-now")
    ProcessorSettings(mode="continuous", kafka_config={"consumer.fetch.wait.max.ms": 5})
    for master in ("local", "local[2]", "local[*]", "local[4,2]", "spark://h:7077", "yarn"):
        check_master(master)
    for master in ("local[zero]", "local[0]", "spark:/h", "lokal"):
        with pytest.raises(ConfigurationError, match="master must be"):
            check_master(master)


def test_a_codec_class_and_a_string_of_topics_are_refused() -> None:
    with pytest.raises(GraphError, match=r"did you mean StringCodec\(\)\?"):
        define_group("g", input("in", StringCodec, count), persist(Int64Codec()))  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"inputs\(\) takes a list of topics, got the string"):
        inputs("abc", StringCodec(), count)
    assert [e.topic for e in inputs(["abc"], StringCodec(), count)] == ["abc"]


class Locked:
    """A codec that holds a lock (as a registry codec holds its client)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return data


def schema(name: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": "n", "type": "long"}]}


def test_the_tester_refuses_one_topic_with_two_codecs_and_unknown_groups() -> None:
    clicks = define_group("a", input("clicks", StringCodec(), count), persist(Int64Codec()))
    other = define_group("b", input("clicks", JsonCodec(), count), persist(Int64Codec()))
    same = define_group("c", input("clicks", StringCodec(), count), persist(Int64Codec()))
    with pytest.raises(ConfigurationError, match="'clicks' with JsonCodec"):
        Tester(clicks, other)
    tester = Tester(clicks, same)  # (two instances of one codec agree)
    raw = define_group("r", input("clicks", BytesCodec(), count), persist(Int64Codec()))
    Tester(clicks, raw)  # (bytes read anything)
    Tester(
        define_group("l1", input("x", Locked(), count)),
        define_group("l2", input("x", Locked(), count)),
    )  # (a lock each: not told apart)
    with pytest.raises(ConfigurationError, match="'x' with AvroCodec"):
        Tester(define_group("v1", input("x", AvroCodec(schema("A")), count)),
               define_group("v2", input("x", AvroCodec(schema("B")), count)))  # fmt: skip
    tester.consume("clicks", "k", "/")
    assert tester.table_value("c-table", "k") == 1
    with pytest.raises(ConfigurationError, match="'aa' is not registered"):
        tester.advance_stream_time("aa", 5)
    with pytest.raises(ConfigurationError, match="keeps no stream time"):
        tester.advance_stream_time("a", 5)
    timed = define_group("t", input("t-in", StringCodec(), count), persist(Int64Codec()),
                         window("m", Tumbling(minutes=1), Int64Codec()))  # fmt: skip
    with pytest.raises(ConfigurationError, match="no partition 3"):
        Tester(timed).advance_stream_time("t", dt.datetime.now(dt.UTC), partition=3)


# -- the command line: one line, the flag, the port ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["view", "serve", "--table", "t", "--port", "70000"], "argument --port: '70000' is not a port"),
        (["view", "serve", "--table", "t", "--port", "-5"], "argument --port: '-5' is not a port"),
        (["view", "serve", "--table", "t", "--http-port", "70000"], "--http-port: '70000' is not"),
        (["broker", "--port", "65536"], "argument --port: '65536' is not a port"),
        (["table", "scan", "t", "--limit", "-1"], "argument --limit: '-1': give an integer >= 0"),
        (["processor", "run", "x:y", "--grace", "soon"], "argument --grace: 'soon'"),
        (["connect", "run", "nosuch:sink", "--checkpoint", "c"], "cannot import 'nosuch'"),
        (["processor", "run", "examples.click_count.group:graph", "--commit-interval", "50"],
         "need 0 <= --commit-interval < --epoch, got --commit-interval=50.0"),
        (["processor", "run", "examples.click_count.group:graph", "--mode", "micro-batch",
          "--trigger", "often"], "--trigger must be a duration"),
        (["processor", "run", "examples.click_count.group:graph", "--trigger", "5 seconds"],
         "--trigger='5 seconds' applies to micro-batches"),
        (["processor", "run", "examples.click_count.group:graph", "--master", "local[zero]"],
         "--master must be local"),
    ],
)  # fmt: skip
def test_command_line_errors_are_one_line_that_names_the_flag_and_exit_2(
    args: list[str], said: str, goka: Callable[..., tuple[int, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("GOKA_BROKERS", "127.0.0.1:1")
    code, err = goka(*args)
    assert code == 2, err
    assert said in one_line(err), err


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_taken_port_names_the_port_and_the_flag(goka: Callable[..., tuple[int, str]]) -> None:
    from goka.errors import PortTakenError

    with taken_port() as port:
        with pytest.raises(PortTakenError, match=f"HTTP port {port} on 127.0.0.1 is taken"):
            HttpService("127.0.0.1", port)
        code, err = goka("view", "serve", "--table", "t", "--brokers", "127.0.0.1:1",
                         "--port", "0", "--http-port", str(port))  # fmt: skip
    assert code == 1, err
    assert f"HTTP port {port} on 127.0.0.1 is taken" in one_line(err)
    assert err.strip().splitlines()[-1].startswith("goka: pass --http-port with a free port")


def test_a_grpc_port_is_not_shared_with_another_server() -> None:
    """A gRPC server holds the port (with gRPC's SO_REUSEPORT, which would let a second server
    that sets it too share the port, and each get half the requests)."""
    from concurrent import futures

    import grpc

    from goka.errors import PortTakenError
    from goka.grpc.server import ViewServer

    holder = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = holder.add_insecure_port("127.0.0.1:0")
    holder.start()
    try:
        with pytest.raises(PortTakenError, match=f"gRPC port 127.0.0.1:{port}"):
            ViewServer([], address=f"127.0.0.1:{port}")
    finally:
        holder.stop(None)


def test_default_http_ports_are_off_the_exporters_range() -> None:
    from goka.commands.options import HTTP_PORTS

    assert all(not 9100 <= p <= 9999 for p in HTTP_PORTS.values()), HTTP_PORTS
    assert len(set(HTTP_PORTS.values())) == len(HTTP_PORTS)


def test_a_starting_brokers_retries_are_debug_not_warnings(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As confluent-kafka logs librdkafka's lines: ``log(level, "%s [%s] %s", fac, name,
    text)``; a line of another text in between is not held back as a repeat. Two minutes
    after the first, they are warnings again (a coordinator that never comes)."""
    import time

    from goka.kafka.config import LIBRDKAFKA_LOGGER, StartingBroker

    starting = next(f for f in LIBRDKAFKA_LOGGER.filters if isinstance(f, StartingBroker))
    monkeypatch.setattr(starting, "_first", None)

    def librdkafka(fac: str, text: str, level: int = logging.WARNING) -> None:
        LIBRDKAFKA_LOGGER.log(level, "%s [%s] %s", fac, "rdkafka#producer-5", text)

    retrying = ("[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
                "Broker: Coordinator load in progress: retrying")  # fmt: skip
    refused = "[thrd:127.0.0.1:1/bootstrap]: Connect to ipv4#127.0.0.1:1 failed: refused"
    with caplog.at_level(logging.INFO, LIBRDKAFKA_LOGGER.name):
        librdkafka("GETPID", retrying)
        librdkafka("FAIL", refused, logging.ERROR)
        librdkafka("FAIL", refused.replace("ipv4", "ipv6"), logging.ERROR)
    assert [r.getMessage().split(" [")[0] for r in caplog.records] == ["FAIL", "FAIL"]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, LIBRDKAFKA_LOGGER.name):
        librdkafka("GETPID", retrying.replace("9092", "9093"))
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    caplog.clear()
    monkeypatch.setattr(starting, "_first", time.monotonic() - StartingBroker.SECONDS - 1)
    with caplog.at_level(logging.INFO, LIBRDKAFKA_LOGGER.name):
        librdkafka("GETPID", retrying.replace("load in progress", "not available"))
    assert [r.levelname for r in caplog.records] == ["WARNING"]


# -- one spelling, one default ------------------------------------------------------------------


def test_dead_letter_is_spelled_as_every_other_choice_and_the_old_spelling_warns(
    goka: Callable[..., tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from goka.connect import ParquetSink

    assert ProcessorSettings(on_error="dead-letter").on_error == "dead-letter"
    with pytest.warns(FutureWarning, match="on_error='dead_letter' is spelled 'dead-letter'"):
        assert ProcessorSettings(on_error="dead_letter").on_error == "dead-letter"
    graph = define_group("g", input("in", StringCodec(), count), persist(Int64Codec()))
    with pytest.warns(FutureWarning, match="on_error='dead_letter'"):
        assert Tester(graph, on_error="dead_letter").on_error == "dead-letter"  # type: ignore[arg-type]
    with pytest.warns(FutureWarning, match="late='dead_letter'"):
        edge = window("m", Tumbling(minutes=1), Int64Codec(), late="dead_letter")  # type: ignore[arg-type]
    assert edge.late == "dead-letter"
    with pytest.warns(FutureWarning, match="on_error='dead_letter'"):
        sink = ParquetSink("t", JsonCodec(), "/tmp/x", on_error="dead_letter",  # type: ignore[arg-type]
                           dead_letter="t-dlq")  # fmt: skip
    assert sink.on_error == "dead-letter"
    monkeypatch.setenv("GOKA_BROKERS", "127.0.0.1:1")
    code, err = goka("processor", "run", "examples.click_count.group:graph", "--on-error",
                     "dead_letter", "--trigger", "often")  # fmt: skip
    assert "goka: warning: --on-error dead_letter is spelled dead-letter now" in err
    assert code == 2 and "--trigger must be a duration" in one_line(err)  # (taken, and on)


def test_both_entry_points_run_continuously_unless_told() -> None:
    from goka.cli import build_parser

    assert ProcessorSettings().mode == "continuous"
    args = build_parser().parse_args(["processor", "run", "g:graph"])
    assert args.mode == "continuous"
