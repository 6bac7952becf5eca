"""The Dockerfile's images, built (``tools.image``: buildah, on a stand-in base where the
official one cannot be pulled) and run as containers on the host's network against an embedded
broker, a PostgreSQL server and an S3 server on this machine: the click-count processor (its
snapshots on S3) and the PostgreSQL sink from the full image, the view server from the slim
one, each as the image's non-root user with its state on a mounted directory; clicks emitted
from the host, the counts read over gRPC and HTTP from the view container and in PostgreSQL;
every container stopped with SIGTERM; then a new processor container with empty state restores
every partition from the snapshots on S3 (the AWS variables point it there)."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from examples.click_count.group import GROUP, TOPIC
from goka import Emitter, StringCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.dev.postgres import LocalPostgres, find_postgres
from goka.dev.pytest_plugin import S3Bucket
from goka.grpc import ViewClient
from tools.containers import Container, buildah_problem
from tools.image import build

from ..helpers import free_port, http_status, wait_for
from .rewinds import without

#: (the first test builds both images: on a machine whose build cache is cold, the base image
#: (debootstrap), Java and every package, several minutes beside the rest of the suite; with the
#: cache, about a minute: the costliest file on a fresh machine, handed to a worker first)
pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark, pytest.mark.postgres, pytest.mark.s3,
              pytest.mark.timeout(900), pytest.mark.cost(300)]  # fmt: skip
UID = 10001  # the image's user (Dockerfile: useradd --uid)
TABLE = f"{GROUP}-table"
GRACE = {"processor": 60.0, "view": 30.0, "sink": 60.0}  # seconds from SIGTERM to exit


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    problem = buildah_problem()
    if problem is not None:
        pytest.skip(problem)
    return {"full": build("full", quiet=True), "slim": build("slim", quiet=True)}


@pytest.fixture
def postgres() -> Iterator[LocalPostgres]:
    if find_postgres() is None:
        pytest.skip("PostgreSQL is not installed (make test installs Debian's postgresql)")
    with LocalPostgres() as server:
        yield server


def state_dir(path: Path) -> Path:
    """A directory for a container's state, owned by the image's user (not root)."""
    path.mkdir()
    os.chown(path, UID, UID)
    return path


def test_images_run_the_click_count_services(
    images: dict[str, str],
    postgres: LocalPostgres,
    tmp_path: Path,
    kafka_broker: EmbeddedBroker,
    make_broker: Callable[..., EmbeddedBroker],
    s3: S3Bucket,
) -> None:
    snapshots = f"{s3.url}/snapshots"
    with contextlib.nullcontext(without(kafka_broker, make_broker, TOPIC, TABLE)) as broker:
        brokers = broker.bootstrap
        topics = TopicManager(brokers)
        topics.ensure_stream_exists(TOPIC, 4)
        topics.ensure_table_exists(TABLE, 4)
        assert postgres.root is not None
        socket = str(postgres.root / "socket")  # the server's Unix socket, mounted as is
        grpc_port, view_http, processor_http, sink_http = (free_port() for _ in range(4))
        state = state_dir(tmp_path / "state")
        containers = {
            "processor": Container(images["full"], [
                "processor", "run", "examples.click_count.group:graph", "--brokers", brokers,
                "--state-dir", "/state/processor", "--http-port", str(processor_http),
                "--snapshot-dir", snapshots,
            ], log=tmp_path / "processor.log", volumes={state: "/state"}, env=s3.env),
            "view": Container(images["slim"], [
                "view", "serve", "--table", TABLE, "--codec", "int64", "--brokers", brokers,
                "--path", "/state/view", "--port", str(grpc_port), "--http-port", str(view_http),
            ], log=tmp_path / "view.log", volumes={state: "/state"}),
            "sink": Container(images["full"], [
                "connect", "run", "examples.click_count.sinks:clicks", "--brokers", brokers,
                "--checkpoint", "/state/sink", "--http-port", str(sink_http),
                "--trigger", "500 milliseconds",
            ], log=tmp_path / "sink.log", volumes={state: "/state", Path(socket): socket},
               env={"CLICKS_DSN": postgres.dsn}),
        }  # fmt: skip
        try:
            clicks = _emit(brokers)
            _counts_served(containers, clicks, grpc_port, view_http)
            _counts_in_postgres(containers, clicks, postgres.dsn)
            wait_for(lambda: http_status(f"http://127.0.0.1:{processor_http}/readyz") == 200,
                     what="the processor's /readyz")  # fmt: skip
            fs = s3.fs()
            wait_for(lambda: all(fs.invalidate_cache() or fs.glob(
                f"{s3.name}/snapshots/{GROUP}/{p}/manifests/*.json") for p in range(4)),
                what="a snapshot of each partition on S3")  # fmt: skip
            for name, container in containers.items():
                code, took = container.stop(GRACE[name])
                assert code == 0, f"{name} exited with {code}: {container.output()[-3000:]}"
        finally:
            for container in containers.values():
                container.remove()
    owners = {path.stat().st_uid for path in state.rglob("*")}
    assert owners == {UID}, owners  # everything the services wrote, as the image's user
    assert {"processor", "view", "sink"} <= {path.name for path in state.iterdir()}
    _restored_in_a_new_container(images["full"], brokers, snapshots, s3, tmp_path)


def _restored_in_a_new_container(image: str, brokers: str, snapshots: str, s3: S3Bucket,
                                 tmp_path: Path) -> None:  # fmt: skip
    """A processor container with nothing on its disk restores every partition from S3."""
    with Container(image, [
        "processor", "run", "examples.click_count.group:graph", "--brokers", brokers,
        "--state-dir", "/state/processor", "--snapshot-dir", snapshots, "--until-caught-up",
    ], log=tmp_path / "restore.log", volumes={state_dir(tmp_path / "new"): "/state"},
            env=s3.env) as container:  # fmt: skip
        code = container.process.wait(timeout=300)
        said = container.output()
    assert code == 0, said[-3000:]
    assert "stores: 0 reused, 0 opened, 0 caught_up, 4 restored, 0 rebuilt" in said, said[-3000:]


def _emit(brokers: str) -> Counter[str]:
    clicks = Counter(f"user-{i % 7}" for i in range(300))
    with Emitter(brokers, TOPIC, StringCodec()) as emitter:
        for user, times in clicks.items():
            for _ in range(times):
                emitter.emit(user, "/page")
    return clicks


def _counts_served(containers: dict[str, Container], clicks: Counter[str], grpc_port: int,
                   http_port: int) -> None:  # fmt: skip
    def served() -> bool:
        _alive(containers)
        try:
            with ViewClient(f"127.0.0.1:{grpc_port}") as client:
                return client.get_many(TABLE, sorted(clicks)) == dict(clicks)
        except Exception:  # not serving yet (the processor or the view still starting)
            return False

    wait_for(served, timeout=240, what="the counts over gRPC from the view container")
    with urllib.request.urlopen(
        f"http://127.0.0.1:{http_port}/tables/{TABLE}/keys/user-3"
    ) as answer:
        assert json.loads(answer.read())["value"] == clicks["user-3"]


def _counts_in_postgres(containers: dict[str, Container], clicks: Counter[str], dsn: str) -> None:
    import psycopg

    def stored() -> dict[str, int] | None:
        _alive(containers)
        try:
            with psycopg.connect(dsn) as conn:
                return dict(conn.execute("SELECT key, value FROM clicks").fetchall())
        except psycopg.errors.UndefinedTable:
            return None

    wait_for(lambda: stored() == dict(clicks), timeout=180, what="the counts in PostgreSQL")


def _alive(containers: dict[str, Container]) -> None:
    for name, container in containers.items():
        assert container.process.poll() is None, f"{name} exited: {container.output()[-3000:]}"


def test_slim_image_serves_views_without_spark_or_java(
    images: dict[str, str], tmp_path: Path
) -> None:
    # the answer goes to a file in a volume: buildah's relay of a short-lived container's
    # output was once found empty on a loaded machine (exit 0, nothing printed)
    probe = ("import importlib.util as u, shutil, pathlib; "
             "pathlib.Path('/probe/found').write_text(repr(([m for m in ('pyspark', 'pandas', "
             "'goka.view', 'goka.grpc.server', 'plyvel') if u.find_spec(m)], "
             "shutil.which('java'))))")  # fmt: skip
    (tmp_path / "probe").mkdir(mode=0o777)
    (tmp_path / "probe").chmod(0o777)  # (the image runs as its own user)
    with Container(
        images["slim"],
        ["-c", probe],
        log=tmp_path / "slim.log",
        entrypoint=["python"],
        volumes={tmp_path / "probe": "/probe"},
    ) as container:
        assert container.process.wait(timeout=60) == 0, container.output()
        found = (tmp_path / "probe" / "found").read_text()
        assert found == "(['goka.view', 'goka.grpc.server', 'plyvel'], None)", found
