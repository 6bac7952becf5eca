"""The ``goka`` command line against the embedded broker: topics, tables, views, errors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from goka import Int64Codec, StringCodec, TopicManager, define_group, input, output, persist
from goka.errors import TopicError
from goka.spark import Processor

from ..helpers import http_status, produce, wait_for

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]


def goka(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goka", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)  # fmt: skip


def test_topics_create_list_describe(brokers: str, request: pytest.FixtureRequest) -> None:
    stream, table = f"{request.node.name}-s", f"{request.node.name}-t"
    made = goka("topics", "create", stream, "--partitions", "3", "--brokers", brokers)
    assert made.returncode == 0 and made.stdout.strip() == f"{stream}: stream, 3 partitions"
    made = goka("topics", "create", table, "--table", "--partitions", "3", "--brokers", brokers)
    assert made.returncode == 0, made.stderr
    again = goka("topics", "create", stream, "--partitions", "3", "--brokers", brokers)
    assert again.stdout.strip().endswith("(existed)")
    listed = goka("topics", "list", "--json", "--brokers", brokers)
    assert json.loads(listed.stdout)[stream] == 3
    described = goka("topics", "describe", table, "--brokers", brokers)
    entry = json.loads(described.stdout)
    assert entry["partitions"] == 3 and entry["config"]["cleanup.policy"] == "compact"
    missing = goka("topics", "describe", "no-such-topic", "--brokers", brokers)
    assert missing.returncode == 1
    assert (
        missing.stderr.strip() == "goka: error: no such topics: no-such-topic (goka topics "
        "list shows them)"
    )


def test_a_group_with_missing_topics_fails_in_one_line_before_creating_anything(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    (tmp_path / "graphs_here.py").write_text(
        "from goka import Int64Codec, StringCodec, define_group, input, output, persist\n"
        "def f(ctx, msg): pass\n"
        f"graph = define_group({topic + '-g'!r}, input({topic!r}, StringCodec(), f),\n"
        f"    output({topic + '-out'!r}, StringCodec()), persist(Int64Codec()))\n"
    )
    run = goka("processor", "run", "graphs_here:graph", "--brokers", brokers, "--http-port", "0",
               cwd=tmp_path)  # fmt: skip
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"output topics do not exist: ['{topic}-out']" in lines[0]
    assert "--create-topics" in lines[0]
    assert not TopicManager(brokers).exists(f"{topic}-g-table")  # nothing was created


def test_create_topics_creates_outputs_with_the_groups_partitions(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), lambda ctx, msg: None),
                         output(f"{topic}-out", StringCodec()), persist(Int64Codec()))  # fmt: skip
    processor = Processor(graph, brokers)
    with pytest.raises(TopicError, match="output topics do not exist"):
        processor.prepare_topics()
    assert processor.create_topics() == 3
    manager = TopicManager(brokers)
    assert manager.partitions(f"{topic}-out") == 3 and manager.partitions(f"{topic}-g-table") == 3


def _serve(brokers: str, table: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "goka", "view", "serve", "--table", table, "--codec", "int64",
         "--brokers", brokers, "--port", "0", "--http-port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def test_table_get_and_scan_through_a_view_service(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    table = new_topic(partitions=2, table=True)
    produce(brokers, table, Int64Codec(), [(f"user-{i:02d}", i) for i in range(30)])
    with _serve(brokers, table) as process:
        try:
            assert process.stdout is not None
            address = process.stdout.readline().split()[-1]
            ready = process.stdout.readline().split()[1] + "/readyz"
            wait_for(lambda: http_status(ready) == 200, what="the view recovered")
            got = goka("table", "get", table, "user-07", "nobody", "--view", address)
            assert got.returncode == 1  # a key was missing
            assert [json.loads(line) for line in got.stdout.splitlines()] == [
                {"key": "user-07", "value": 7},
                {"key": "nobody", "value": None},
            ]
            scan = goka("table", "scan", table, "--prefix", "user-1", "--limit", "3",
                        "--view", address)  # fmt: skip
            assert scan.returncode == 0, scan.stderr
            assert [json.loads(line)["key"] for line in scan.stdout.splitlines()] == [
                "user-10",
                "user-11",
                "user-12",
            ]
            unknown = goka("table", "get", "no-such-table", "k", "--view", address)
            assert unknown.returncode == 1 and unknown.stderr.startswith("goka: error:")
            assert len(unknown.stderr.splitlines()) == 1, unknown.stderr
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C stops like SIGTERM
            assert process.wait(timeout=30) == 0


def _listening(pid: int) -> set[tuple[str, int]]:
    """The addresses process ``pid`` listens on (its sockets in /proc/net/tcp and tcp6; an
    IPv4-mapped IPv6 address as its IPv4 one)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # (listening)
                continue
            host, port = address.split(":")
            raw = b"".join(bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8))
            if raw[:12] == b"\0" * 10 + b"\xff\xff":
                raw = raw[12:]
            family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
            found.add((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def test_view_serve_listens_only_where_told(brokers: str, new_topic: Callable[..., str]) -> None:
    table = new_topic(partitions=1, table=True)
    with _serve(brokers, table, "--host", "127.0.0.2", "--http-host", "127.0.0.2") as process:
        try:
            assert process.stdout is not None
            grpc_address = process.stdout.readline().split()[-1]
            http_url = process.stdout.readline().split()[1]
            host, port = grpc_address.rsplit(":", 1)
            http_port = int(http_url.rsplit(":", 1)[1])
            assert host == "127.0.0.2"
            socket.create_connection(("127.0.0.2", int(port)), timeout=2).close()
            socket.create_connection(("127.0.0.2", http_port), timeout=2).close()
            # (its own listening sockets: another process may listen on 127.0.0.1 at the same
            # port numbers, which a connection there would reach)
            assert _listening(process.pid) == {("127.0.0.2", int(port)), ("127.0.0.2", http_port)}
        finally:
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=30) == 0
