"""The gRPC view service over a real socket: every method, every error status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from prometheus_client import REGISTRY

from goka import ConfigurationError, Int64Codec, StringCodec
from goka.errors import ViewUnreachableError
from goka.grpc import ClientTls, TableNotServedError, TlsConfig, ViewClient, ViewServer
from goka.storage import LevelDBStorage
from goka.view import View, ViewNotReadyError

from ..helpers import free_port, produce, wait_for
from .certs import CertificateAuthority

pytestmark = pytest.mark.kafka
KEYS = 10_000


@pytest.fixture(scope="module")
def table(brokers: str, topic_manager: Any) -> str:
    name = "grpc-counts-table"
    topic_manager.ensure_table_exists(name, 4)
    produce(brokers, name, Int64Codec(), ((f"user-{i:05}", i) for i in range(KEYS)))
    return name


@pytest.fixture(scope="module")
def served(brokers: str, table: str) -> Iterator[tuple[ViewServer, View[int], View[str]]]:
    view = View(brokers, table, Int64Codec()).start()
    view.wait_recovered(60)
    idle = View(brokers, "grpc-idle-table", StringCodec())  # never started: not recovered
    with ViewServer([view, idle], max_request_bytes=4096, max_keys=100) as server:
        yield server, view, idle
    view.close()
    idle.close()


@pytest.fixture
def client(served: tuple[ViewServer, Any, Any]) -> Iterator[ViewClient]:
    with ViewClient(served[0].address) as c:
        yield c


def test_get(client: ViewClient, table: str) -> None:
    assert client.get(table, "user-00042") == 42
    assert client.get(table, "nobody") is None


@pytest.mark.smoke
def test_get_many(client: ViewClient, table: str) -> None:
    assert client.get_many(table, ["user-00001", "nobody", "user-09999"]) == {
        "user-00001": 1,
        "user-09999": 9999,
    }


def test_scan_streams_all_10k_keys_in_order(client: ViewClient, table: str) -> None:
    keys = [k for k, _ in client.scan(table)]
    assert len(keys) == KEYS and keys == sorted(keys)


def test_scan_prefix_range_limit_reverse(client: ViewClient, table: str) -> None:
    assert [k for k, _ in client.scan(table, prefix="user-0001")] == [
        f"user-0001{i}" for i in range(10)
    ]
    assert dict(client.scan(table, start="user-00100", stop="user-00103")) == {
        "user-00100": 100,
        "user-00101": 101,
        "user-00102": 102,
    }
    assert [k for k, _ in client.scan(table, limit=3, reverse=True)] == [
        "user-09999",
        "user-09998",
        "user-09997",
    ]


def test_info(client: ViewClient, table: str) -> None:
    (info,) = client.info(table)
    assert (info.table, info.state, info.recovered, info.codec, info.applied) == (
        table,
        "running",
        True,
        "int64",
        KEYS,
    )
    assert sum(offset for offset, _, _ in info.partitions.values()) == KEYS
    assert all(lag == 0 for _, _, lag in info.partitions.values())
    assert {i.table for i in client.info()} == {table, "grpc-idle-table"}


def _status(call: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code()  # type: ignore[no-any-return]


def test_error_statuses(served: tuple[ViewServer, Any, Any], table: str) -> None:
    from goka.grpc.v1 import view_pb2, view_pb2_grpc

    with grpc.insecure_channel(served[0].address) as channel:
        stub = view_pb2_grpc.ViewServiceStub(channel)
        assert (
            _status(lambda: stub.Get(view_pb2.GetRequest(table="nope", key=b"k")))
            == grpc.StatusCode.NOT_FOUND
        )
        assert (
            _status(lambda: list(stub.Scan(view_pb2.ScanRequest(table="nope"))))
            == grpc.StatusCode.NOT_FOUND
        )
        assert (
            _status(lambda: stub.Info(view_pb2.InfoRequest(table="nope")))
            == grpc.StatusCode.NOT_FOUND
        )
        assert (
            _status(lambda: stub.Get(view_pb2.GetRequest(key=b"k")))
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        big = view_pb2.GetRequest(table=table, key=b"k" * 5000)  # over max_request_bytes=4096
        assert _status(lambda: stub.Get(big)) == grpc.StatusCode.INVALID_ARGUMENT
        many = view_pb2.GetManyRequest(
            table=table, keys=[b"%d" % i for i in range(101)]
        )  # over max_keys
        assert _status(lambda: stub.GetMany(many)) == grpc.StatusCode.INVALID_ARGUMENT
        idle = view_pb2.GetRequest(table="grpc-idle-table", key=b"k")
        assert _status(lambda: stub.Get(idle)) == grpc.StatusCode.UNAVAILABLE
        idle_scan = view_pb2.ScanRequest(table="grpc-idle-table")
        assert _status(lambda: list(stub.Scan(idle_scan))) == grpc.StatusCode.UNAVAILABLE


def test_client_turns_statuses_into_goka_errors(client: ViewClient, table: str) -> None:
    with pytest.raises(TableNotServedError, match="table 'nope' is not served here"):
        client.get("nope", "k")
    with pytest.raises(ViewNotReadyError, match="has not recovered yet"):
        client.get("grpc-idle-table", "k")
    with pytest.raises(ConfigurationError, match="101 keys exceed the limit of 100"):
        client.get_many(table, [str(i) for i in range(101)])


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_client_cancelling_a_scan_stops_the_stream(client: ViewClient, table: str) -> None:
    before = _sample("goka_grpc_requests_total", method="Scan", code="CANCELLED")
    for count, _ in enumerate(client.scan(table), 1):
        if count == 10:
            break  # closing the generator cancels the call
    wait_for(lambda: _sample("goka_grpc_requests_total", method="Scan", code="CANCELLED") == before + 1,
             what="the server to see the cancellation")  # fmt: skip


def test_requests_are_counted_and_timed_by_method_and_status(
    client: ViewClient, table: str
) -> None:
    ok, missing = _sample("goka_grpc_requests_total", method="Get", code="OK"), \
        _sample("goka_grpc_requests_total", method="Get", code="NOT_FOUND")  # fmt: skip
    timed = _sample("goka_grpc_request_duration_seconds_count", method="Get")
    client.get(table, "user-00001")
    with pytest.raises(TableNotServedError):
        client.get("nope", "k")
    assert _sample("goka_grpc_requests_total", method="Get", code="OK") == ok + 1
    assert _sample("goka_grpc_requests_total", method="Get", code="NOT_FOUND") == missing + 1
    assert _sample("goka_grpc_request_duration_seconds_count", method="Get") == timed + 2


def test_health_per_table_and_overall(served: tuple[ViewServer, Any, Any], table: str) -> None:
    with grpc.insecure_channel(served[0].address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        check = lambda name: health.Check(health_pb2.HealthCheckRequest(service=name)).status  # noqa: E731
        assert check(f"table/{table}") == health_pb2.HealthCheckResponse.SERVING
        assert check("table/grpc-idle-table") == health_pb2.HealthCheckResponse.NOT_SERVING
        assert check("") == health_pb2.HealthCheckResponse.NOT_SERVING  # not every view is ready


def test_reflection_lists_the_services(served: tuple[ViewServer, Any, Any]) -> None:
    with grpc.insecure_channel(served[0].address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"goka.view.v1.ViewService", "grpc.health.v1.Health"} <= services


def test_tls(recovered: View[int], table: str, tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("server", server=True)
    with ViewServer([recovered], tls=TlsConfig(cert, key)) as server, \
         ViewClient(f"localhost:{server.port}", root_certificates=ca.cert_file) as client:  # fmt: skip
        assert client.get(table, "user-00007") == 7
        with ViewClient(f"localhost:{server.port}", timeout=2) as plaintext, \
             pytest.raises(ViewUnreachableError, match="UNAVAILABLE.*TLS settings"):  # fmt: skip
            plaintext.get(table, "user-00007")


@pytest.fixture
def recovered(brokers: str, table: str) -> Iterator[View[int]]:
    view = View(brokers, table, Int64Codec()).start()
    view.wait_recovered(60)
    yield view
    view.close()


def test_mutual_tls_serves_only_clients_with_a_certificate_of_its_client_ca(
    recovered: View[int], table: str, tmp_path: Path
) -> None:
    ours, theirs = CertificateAuthority(tmp_path / "ours"), CertificateAuthority(tmp_path / "x")
    tls = TlsConfig(*ours.issue("server", server=True), client_ca_file=ours.cert_file)
    with ViewServer([recovered], tls=tls) as server:
        target = f"localhost:{server.port}"
        attempts = {
            "no client certificate": ClientTls(ours.cert_file),
            "a certificate of another CA": ClientTls(
                ours.cert_file, *theirs.issue("intruder", server=False)
            ),
        }
        for what, settings in attempts.items():
            assert "cannot be reached" in _refused(target, settings, table), what
        served = ClientTls(ours.cert_file, *ours.issue("reader", server=False))
        with ViewClient(target, tls=served) as client:
            assert client.get(table, "user-00007") == 7
            assert dict(client.scan(table, prefix="user-0000")) == {
                f"user-0000{i}": i for i in range(10)
            }


def _refused(target: str, settings: ClientTls, table: str) -> str:
    with ViewClient(target, tls=settings, timeout=3) as client:
        try:
            client.get(table, "user-00007")
        except ViewUnreachableError as exc:
            return str(exc)
    raise AssertionError("served")


def test_client_tls_settings_are_checked_when_declared(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="certificate and its key go together"):
        ViewClient("localhost:1", tls=ClientTls(cert_file=tmp_path / "c.pem"))
    with pytest.raises(ConfigurationError, match="cannot read .*missing.pem"):
        ViewClient("localhost:1", tls=ClientTls(ca_file=tmp_path / "missing.pem"))
    with pytest.raises(ConfigurationError, match="cannot read .*k.pem: No such file"):
        ViewServer([], tls=TlsConfig(tmp_path / "missing.pem", tmp_path / "k.pem"))


def test_a_server_that_is_not_there_is_unreachable_not_unready() -> None:
    with ViewClient(f"127.0.0.1:{free_port()}", timeout=2) as client, \
         pytest.raises(ViewUnreachableError, match=r"cannot be reached \(UNAVAILABLE"):  # fmt: skip
        client.get("counts", "k")


def test_two_views_of_one_table_are_refused(brokers: str, table: str) -> None:
    a, b = View(brokers, table, Int64Codec()), View(brokers, table, Int64Codec())
    with pytest.raises(ConfigurationError, match=f"table '{table}' is served twice"):
        ViewServer([a, b])
    a.close()
    b.close()


def test_serve_command_serves_metrics_and_shuts_down_on_sigterm(
    brokers: str, table: str, tmp_path: Path
) -> None:
    metrics_port = free_port()
    command = [sys.executable, "-m", "goka.cli", "view", "serve", "--table", table, "--codec", "int64",
               "--brokers", brokers, "--path", str(tmp_path / "views"), "--host", "127.0.0.1",
               "--port", "0", "--http-port", str(metrics_port)]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("view server listening on 127.0.0.1:"), line
            address = line.split()[-1]
            with ViewClient(address) as c:
                wait_for(lambda: c.info(table)[0].recovered, what="recovery")
                assert c.get(table, "user-00003") == 3
            metrics = (
                urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
            )
            assert f'goka_view_applied_records_total{{table="{table}"}} {float(KEYS)}' in metrics
            assert 'goka_grpc_requests_total{code="OK",method="Get"}' in metrics
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
    with LevelDBStorage(tmp_path / "views" / table, table) as storage:  # closed cleanly, reopens
        assert storage.get("user-00003") == b"3"


def test_generated_code_is_current() -> None:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "tools.gen_proto", "--check"], cwd=root,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_a_key_s_windows_are_read_over_grpc_by_time_range(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    import functools

    from goka.time.rows import composite
    from goka.windows import Window, read_windows

    table = new_topic("grpc-windows", table=True)
    minute = 60_000
    starts = [1_792_879_200_000 + i * minute for i in range(6)]
    rows = [(composite(k, s, s + minute), n) for n, s in enumerate(starts) for k in ("a", "ab")]
    produce(brokers, table, Int64Codec(), rows)
    view = View(brokers, table, Int64Codec()).start()
    try:
        view.wait_recovered(60)
        with ViewServer([view]) as server, ViewClient(server.address) as client:
            scan = functools.partial(client.scan, table)
            mine = [(Window(s, s + minute), n) for n, s in enumerate(starts)]
            assert read_windows(scan, "a") == mine  # not "ab"'s, which shares the prefix
            assert read_windows(scan, "a", latest=True) == mine[-1:]
            assert read_windows(scan, "a", since=starts[2], until=starts[4]) == mine[2:4]
            assert read_windows(scan, "missing") == []
    finally:
        view.close()
