"""The places beside a processor's checkpoint and the check of a location at start, on a real
S3 server (S3Proxy over HTTP): the stop signal and the partition board written by one process
and read by another (each its own client and listing cache, as a driver and its executors);
a store reached through the standard AWS variables or a profile; a wrong endpoint, credential
or bucket refused at once with one error naming the URL."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from goka.dev.pytest_plugin import S3Bucket
from goka.errors import ConfigurationError
from goka.processing.signals import PartitionBoard, StopSignal
from goka.storage.urls import check_location

from ..helpers import wait_for

pytestmark = [pytest.mark.s3, pytest.mark.cost(13)]


def _own(s3: S3Bucket) -> dict[str, object]:
    """Storage options of a client of its own (another process's: no cache shared)."""
    return {**s3.storage_options, "skip_instance_cache": True}


def test_the_stop_signal_and_the_board_on_s3_reach_another_process(s3: S3Bucket) -> None:
    checkpoint = f"{s3.url}/group/checkpoint"
    driver_stop = StopSignal(f"{checkpoint}/goka-stop", every=0, storage_options=_own(s3))
    task_stop = StopSignal(f"{checkpoint}/goka-stop", every=0, storage_options=_own(s3))
    driver = PartitionBoard(f"{checkpoint}/goka-partitions", every=0, storage_options=_own(s3))
    task = PartitionBoard(f"{checkpoint}/goka-partitions", every=0, storage_options=_own(s3))
    assert not task_stop() and driver.read() == {}  # (both looked: their caches are warm)
    task.report(0, "restoring", 10, 100)
    wait_for(lambda: driver.read().get(0, {}).get("state") == "restoring", 10, "the board")
    task.report(0, "running")
    task.progress(0, 42)
    wait_for(lambda: driver.read().get(0, {}).get("state") == "running", 10, "the new state")
    since = time.time() - 60
    wait_for(lambda: driver.sample(since)[1] == 42, 10, "the epoch's progress")
    driver_stop.set()
    assert task_stop()
    driver_stop.clear()
    fresh = StopSignal(f"{checkpoint}/goka-stop", every=0, storage_options=_own(s3))
    assert not fresh()
    task.settle()


def test_standard_aws_variables_and_profiles_reach_the_store(
    s3: S3Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    check_location(f"{s3.url}/snapshots", {"skip_instance_cache": True})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name)
    (tmp_path / "config").write_text(f"[profile dev]\nendpoint_url = {s3.server.endpoint}\n")
    (tmp_path / "credentials").write_text(f"[dev]\naws_access_key_id = {s3.server.access_key}\n"
                                          f"aws_secret_access_key = {s3.server.secret_key}\n")  # fmt: skip
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "dev")
    check_location(f"{s3.url}/snapshots", {"skip_instance_cache": True})
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(ConfigurationError, match="nobody"):
        check_location(f"{s3.url}/snapshots", {"skip_instance_cache": True})


@pytest.mark.parametrize(
    ("change", "said"),
    [({"endpoint_url": "http://127.0.0.1:9"}, "cannot reach its store at endpoint "
      "http://127.0.0.1:9"),
     ({"secret": "wrong"}, "access denied"),
     ({"key": "nobody"}, "access denied"),
     ({}, "bucket 'no-such-bucket' does not exist")],
    ids=["endpoint", "secret", "key", "bucket"],
)  # fmt: skip
def test_a_wrong_endpoint_credential_or_bucket_is_one_clear_error_naming_the_url(
    s3: S3Bucket, change: dict[str, str], said: str
) -> None:
    url = "s3://no-such-bucket/x" if not change else f"{s3.url}/x"
    options = {**_own(s3), **change}
    options["config_kwargs"] = {**s3.storage_options["config_kwargs"],
                                "retries": {"max_attempts": 1}, "connect_timeout": 2}  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as refused:
        check_location(url, options, what="snapshot_dir")
    assert str(refused.value).startswith(f"snapshot_dir {url}: {said}"), refused.value
    assert time.monotonic() - started < 20


def test_a_store_that_does_not_answer_is_refused_within_the_time_given(s3: S3Bucket) -> None:
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(ConfigurationError, match="did not answer within 2s"):
            check_location(f"{s3.url}/x", {**_own(s3), "endpoint_url": endpoint}, timeout=2)
        assert time.monotonic() - started < 5
        waiting = [t for t in threading.enumerate() if t.name == "goka-check"]
        assert waiting and all(t.daemon for t in waiting)  # (the process can still exit)


def test_goka_s3_serves_until_sigterm_and_says_how_to_reach_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import signal
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-m", "goka.cli", "s3", "--bucket", "made-here"],
                          stdout=subprocess.PIPE, text=True) as server:  # fmt: skip
        try:
            assert server.stdout is not None
            said = [server.stdout.readline() for _ in range(8)]
            assert "buckets made: made-here" in said[0], said
            exports = dict(line.removeprefix("export ").strip().split("=", 1)
                           for line in said[1:])  # fmt: skip
            for name, value in exports.items():
                monkeypatch.setenv(name, value)
            check_location("s3://made-here/x", {"skip_instance_cache": True})  # (its variables)
        finally:
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0
