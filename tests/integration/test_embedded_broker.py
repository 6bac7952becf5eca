"""The development brokers: Apache Kafka (one KRaft node) and Tansu, started, restarted, stopped,
their failures to start, and the pytest plugin's handling of a broker that died."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from goka import StringCodec, TopicManager
from goka.dev import KAFKA_VERSION, TANSU_BINARY_ENV, EmbeddedBroker, find_tansu_binary
from goka.dev.kafka import KafkaNode, find_java, kafka_libs
from goka.emitter import Emitter
from goka.errors import BrokerError, BrokerNotFoundError, ConfigurationError
from goka.kafka.admin import KafkaAdmin
from goka.kafka.consumer import read_to_end

from ..helpers import GRPC_BUSY, wait_for

pytestmark = [pytest.mark.cost(100), pytest.mark.kafka]

pytest_plugins = ["pytester"]


def test_tansu_binary_override_must_be_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TANSU_BINARY_ENV, str(tmp_path / "tansu"))
    with pytest.raises(BrokerNotFoundError, match=f"\\${TANSU_BINARY_ENV}=.* is not an executable"):
        find_tansu_binary()


def test_tansu_binary_override_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_tansu_binary()
    monkeypatch.setenv(TANSU_BINARY_ENV, str(real))
    assert find_tansu_binary() == real


def emit_and_read(broker: EmbeddedBroker, topic: str) -> list[bytes | None]:
    TopicManager(broker.bootstrap).ensure_stream_exists(topic, 1)
    with Emitter(broker.bootstrap, topic, StringCodec()) as emitter:
        emitter.emit_sync("k", "v", timeout=30)
    return [r.value for r in read_to_end(broker.bootstrap, topic)]


def test_tansu_round_trip_and_an_empty_restart_on_the_same_port() -> None:
    with EmbeddedBroker("tansu") as broker:
        assert emit_and_read(broker, "t") == [b"v"]
        port, pid = broker.port, broker.pid
        broker.restart()
        assert broker.running and broker.port == port and broker.pid != pid
        assert not TopicManager(broker.bootstrap).exists("t")  # memory only: a restart is empty
    assert not broker.running
    broker.close()  # idempotent


def test_kafka_keeps_its_data_through_a_restart_and_a_kill_but_not_an_empty_restart() -> None:
    with EmbeddedBroker("kafka") as broker:
        assert broker.name == f"Apache Kafka {KAFKA_VERSION}"
        assert emit_and_read(broker, "kept") == [b"v"]
        port, pid = broker.port, broker.pid
        broker.restart(keep_data=True)
        assert broker.port == port and broker.pid != pid
        assert [r.value for r in read_to_end(broker.bootstrap, "kept")] == [b"v"]
        broker.kill()  # as a crash: its logs are recovered at the next start
        assert not broker.running
        broker.start()
        assert emit_and_read(broker, "kept") == [b"v", b"v"]
        broker.restart()  # a broker replaced without its data
        assert broker.running and broker.port == port
        assert not TopicManager(broker.bootstrap).exists("kept")
        assert emit_and_read(broker, "kept") == [b"v"]
    assert not broker.running
    broker.close()  # idempotent


def test_kafka_keeps_records_of_any_age_unless_their_topic_says_otherwise() -> None:
    """Tests replay fixed past event times: Kafka's 7 days of retention would delete them (the
    active segment too) at its next check, every 5 minutes, in the middle of a test."""
    checks = {"log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "0"}
    with EmbeddedBroker("kafka", settings=checks) as broker:
        manager = TopicManager(broker.bootstrap)
        manager.ensure_stream_exists("any-age", 1)
        manager.ensure_stream_exists("a-week", 1, retention_ms=7 * 86_400_000)
        with Emitter(broker.bootstrap, "any-age", StringCodec()) as any_age, \
                Emitter(broker.bootstrap, "a-week", StringCodec()) as a_week:  # fmt: skip
            for emitter in (any_age, a_week):
                for i in range(10):
                    emitter.emit("k", "v", timestamp=1_767_225_600_000 + i)  # 2026-01-01
                assert emitter.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ages"})
        try:
            week = TopicPartition("a-week", 0)
            wait_for(lambda: consumer.get_watermark_offsets(week, timeout=5) == (10, 10),
                     what="the week-old records deleted by a retention check")  # fmt: skip
            checked = consumer.get_watermark_offsets(TopicPartition("any-age", 0), timeout=5)
            assert checked == (0, 10)
        finally:
            consumer.close()


def test_tansu_cannot_restart_with_its_data() -> None:
    with EmbeddedBroker("tansu") as broker:
        assert broker.name.startswith("Tansu 0.")
        with pytest.raises(ConfigurationError, match="keeps its data in memory"):
            broker.restart(keep_data=True)


def test_unknown_kinds_and_settings_for_tansu_fail_when_made() -> None:
    with pytest.raises(ConfigurationError, match="unknown broker kind 'redpanda'"):
        EmbeddedBroker("redpanda")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Tansu takes no broker settings"):
        EmbeddedBroker("tansu", settings={"num.partitions": "3"})


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_a_taken_port_fails_with_the_brokers_last_lines_and_what_to_retry(kind: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = EmbeddedBroker(kind, port=taken.getsockname()[1], startup_timeout=60)  # type: ignore[arg-type]
        with pytest.raises(BrokerError, match="exited with code") as failed:
            broker.start()
        broker.close()
    text = str(failed.value)
    assert "is port" in text and "taken? retry on another: EmbeddedBroker(" in text
    assert "ddress already in use" in text or "AddrInUse" in text  # the broker's own words


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_a_port_picked_for_the_broker_and_taken_before_it_binds_is_picked_again(
    kind: str,
) -> None:  # fmt: skip
    """Another process takes the port picked for the broker before the broker binds it (as
    a test beside it, picking its own, can): the broker starts on a newly picked one."""
    broker = EmbeddedBroker(kind, startup_timeout=60)  # type: ignore[arg-type]
    first = broker.port
    try:
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", first))
            taken.listen()
            broker.start()
        assert broker.port != first
        assert KafkaAdmin(broker.bootstrap).cluster().brokers
    finally:
        broker.close()


def test_no_java_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerNotFoundError, match="no java was found: install a Java 17"):
        EmbeddedBroker("kafka").start()


def test_no_maven_without_the_jars_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerNotFoundError, match="Maven is needed to fetch them: install Maven"):
        kafka_libs(cache=tmp_path / "cache")


def test_storage_that_cannot_be_formatted_fails_with_the_tools_words_and_the_retry(
    tmp_path: Path,
) -> None:
    # A cache of its own (the jars linked), so that no formatted template is there to copy
    (tmp_path / "libs").symlink_to(kafka_libs(), target_is_directory=True)
    node = KafkaNode(node_id=1, port=1, controller_port=2, voters="1@127.0.0.1:2",
                     workdir=tmp_path / "node", settings={"metadata.log.dir": "/proc/goka-no"})  # fmt: skip
    with pytest.raises(BrokerError, match="could not format Kafka storage") as failed:
        node.prepare(tmp_path / "libs", find_java())
    text = str(failed.value)
    assert "/proc/goka-no" in text  # the tool's own words name the folder
    assert "retry with: " in text and "kafka.tools.StorageTool format" in text
    assert Path(text.split("--config ")[-1].strip()).is_file()  # the retry's settings are kept
    assert not (tmp_path / "formatted" / "node-1").exists()  # no half-made template is kept
    assert not (tmp_path / "node" / "data").exists()


@pytest.mark.slow
def test_a_version_maven_cannot_resolve_fails_with_its_words_and_the_retry(
    tmp_path: Path,
) -> None:
    with pytest.raises(BrokerError, match="Maven could not fetch Apache Kafka 0.0.404") as failed:
        kafka_libs("0.0.404", cache=tmp_path)
    assert "retry with: " in str(failed.value) and "dependency:copy-dependencies" in str(
        failed.value
    )
    assert not list((tmp_path / "kafka-0.0.404").iterdir())  # nothing half-written is left


BROKERS_FROM_GRPC = (
    GRPC_BUSY
    + """
from goka.dev import EmbeddedBroker

for kind, times in (("tansu", int(sys.argv[1])), ("kafka", 1)):
    for i in range(times):
        with EmbeddedBroker(kind) as broker:
            assert broker.running
print("started all")
"""
)


def test_brokers_start_from_a_process_busy_with_grpc(tmp_path: Path) -> None:
    # A fork() from such a process crashed the child now and then before it ran the broker
    # (SIGSEGV or SIGABRT in gRPC's fork handlers: 16 of 100 starts here); none may now.
    script = tmp_path / "busy.py"
    script.write_text(BROKERS_FROM_GRPC)
    done = subprocess.run([sys.executable, str(script), "40"], capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0 and "started all" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_cli_runs_a_broker_in_the_foreground_and_names_it(kind: str) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "goka.cli", "broker", "--kind", kind],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            bootstrap = line.rsplit(" ", 1)[-1].strip()
            name = f"Apache Kafka {KAFKA_VERSION}" if kind == "kafka" else "Tansu 0."
            assert line.startswith(f"{name}")
            assert "broker listening; bootstrap servers: 127.0.0.1:" in line
            assert TopicManager(bootstrap).ensure_stream_exists("cli-topic", 2) == 2
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0


def test_a_test_whose_session_broker_died_fails_at_once_with_its_log(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest('pytest_plugins = ["goka.dev.pytest_plugin"]')
    pytester.makepyfile(textwrap.dedent("""
        def test_kills_it(kafka_broker):
            kafka_broker.kill()

        def test_needs_it(brokers):
            pass

        def test_needs_none():
            pass
    """))  # fmt: skip
    result = pytester.runpytest_subprocess("--broker", "tansu", "-p", "no:cacheprovider",
                                           timeout=120)  # fmt: skip
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the session's Tansu * broker is not running; its log ends:*"])
