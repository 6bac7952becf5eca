"""pytest fixtures for code built on goka-py: ``pytest_plugins = ["goka.dev.pytest_plugin"]``.

* ``kafka_broker``: one development broker for the whole session, of the kind
  ``--broker`` names (``kafka``, the default: Apache Kafka; ``tansu``: the light one).
* ``make_broker``: a factory of brokers of that kind for tests that need their own (started;
  closed after the test).
* ``brokers``: the session broker's bootstrap servers string.
* ``new_topic``: a factory creating a uniquely named topic, ``new_topic(partitions=4)``.
* ``s3_server``: one S3 API server for the session (:class:`goka.dev.s3.LocalS3`, S3Proxy);
  ``s3``: a new bucket on it for the test (:class:`S3Bucket`: its URL, storage options,
  environment and file system).

A test that uses the session broker fails at once, with the broker's last log lines, if the
broker is no longer running; a failing test's report holds them too, and the whole log is kept
in pytest's temporary folder when a test failed.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from goka.dev.broker import KINDS, EmbeddedBroker
from goka.dev.s3 import LocalS3
from goka.topic_manager import TopicManager

_counter = itertools.count()

#: Log lines of the broker shown in a failing test's report.
REPORT_LINES = 40


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--broker", choices=KINDS, default="kafka",
                     help="the development broker the tests run on (default: kafka)")  # fmt: skip


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    """The development broker shared by the session."""
    with EmbeddedBroker(request.config.getoption("--broker")) as broker:
        yield broker
        if request.session.testsfailed and broker.log_path.exists():
            kept = tmp_path_factory.getbasetemp() / "broker.log"
            shutil.copyfile(broker.log_path, kept)
            print(f"\nthe session broker's log: {kept}")


@pytest.fixture
def make_broker(request: pytest.FixtureRequest) -> Iterator[Callable[..., EmbeddedBroker]]:
    """Return a factory of started brokers of the session's kind: ``make_broker(port=...)``
    takes :class:`EmbeddedBroker`'s keyword arguments. Closed after the test."""
    made: list[EmbeddedBroker] = []

    def make(**kwargs: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(request.config.getoption("--broker"), **kwargs)
        made.append(broker)
        return broker.start()

    yield make
    for broker in made:
        broker.close()


@pytest.fixture(autouse=True)
def _session_broker_alive(request: pytest.FixtureRequest) -> None:
    """Fail a test that needs the session broker at once if it died (not with a timeout)."""
    if "kafka_broker" not in request.fixturenames:
        return
    broker: EmbeddedBroker = request.getfixturevalue("kafka_broker")
    if not broker.running:
        pytest.fail(f"the session's {broker.name} broker is not running; its log ends:\n"
                    f"{broker.log_tail(REPORT_LINES)}", pytrace=False)  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Add the session broker's last log lines to a failing test's report."""
    report = yield
    if report.failed and "kafka_broker" in getattr(item, "fixturenames", ()):
        broker = item.funcargs.get("kafka_broker") if hasattr(item, "funcargs") else None
        if isinstance(broker, EmbeddedBroker):
            state = "running" if broker.running else "NOT RUNNING"
            report.sections.append(
                (f"{broker.name} broker log ({state}; {broker.log_path})",
                 broker.log_tail(REPORT_LINES))
            )  # fmt: skip
    return report


@pytest.fixture(scope="session")
def brokers(kafka_broker: EmbeddedBroker) -> str:
    """Bootstrap servers of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def topic_manager(brokers: str) -> TopicManager:
    """A topic manager on the session's broker."""
    return TopicManager(brokers)


@pytest.fixture
def new_topic(topic_manager: TopicManager, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Return a factory that creates a fresh stream (or, with ``table=True``, table) topic."""

    def create(prefix: str = "", *, partitions: int = 4, table: bool = False) -> str:
        base = prefix or request.node.name.replace("[", "-").replace("]", "")
        name = f"{base[:150]}-{next(_counter)}"
        if table:
            topic_manager.ensure_table_exists(name, partitions)
        else:
            topic_manager.ensure_stream_exists(name, partitions)
        return name

    return create


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[LocalS3]:  # fmt: skip
    """The S3 API server shared by the session (its log kept when a test failed)."""
    with LocalS3() as server:
        yield server
        if request.session.testsfailed and server.log_path.exists():
            kept = tmp_path_factory.getbasetemp() / "s3proxy.log"
            shutil.copyfile(server.log_path, kept)
            print(f"\nthe session S3 server's log: {kept}")


@dataclass(frozen=True)
class S3Bucket:
    """A test's own bucket on the session's S3 server.

    Attributes:
        server: the server.
        name: the bucket's name.
    """

    server: LocalS3
    name: str

    @property
    def url(self) -> str:
        """``s3://<bucket>``."""
        return f"s3://{self.name}"

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.server.storage_options

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables that point another process at the server."""
        return self.server.env

    def fs(self) -> Any:
        """An s3fs file system of the server (its own instance: no cache shared with code under
        test)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)


@pytest.fixture
def s3(s3_server: LocalS3) -> S3Bucket:
    """A new bucket on the session's S3 server."""
    if not s3_server.running:
        pytest.fail(f"the session's S3 server is not running; its log ends:\n"
                    f"{s3_server.log_tail(REPORT_LINES)}", pytrace=False)  # fmt: skip
    return S3Bucket(s3_server, s3_server.make_bucket())
