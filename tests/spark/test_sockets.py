"""A local processor's Spark listens on the loopback interface only."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.procs import descendants

pytestmark = pytest.mark.spark


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:  # exited meanwhile
            continue
    return inodes


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])  # little-endian
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    address = ipaddress.IPv6Address(words)
    return address.ipv4_mapped or address


def listening(pids: set[int]) -> list[str]:
    """``address:port`` of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes, found = _socket_inodes(pids), []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            (host, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state == "0A" and inode in inodes:
                found.append(f"{_address(host)}:{int(port, 16)}")
    return found


def test_a_local_session_listens_on_loopback_only(spark: Any) -> None:
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()  # Python workers
    jvm = spark.sparkContext._gateway.proc.pid
    sockets = listening(descendants(jvm))
    assert sockets, "found no listening socket of the Spark JVM: is /proc readable?"
    exposed = [s for s in sockets if not ipaddress.ip_address(s.rsplit(":", 1)[0]).is_loopback]
    assert exposed == [], f"listening beyond loopback: {exposed} (all: {sockets})"


_WITH_UI = """
import json, sys
from goka.spark import build_session
from tests.spark.procs import descendants
from tests.spark.test_sockets import listening
session = build_session("goka-ui", "local[1]")
print(json.dumps(listening(descendants(session.sparkContext._gateway.proc.pid))))
session.stop()
"""


def test_the_spark_ui_when_asked_for_listens_on_loopback_too(tmp_path: Path) -> None:
    env = {**os.environ, "GOKA_SPARK_UI": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("SPARK_LOCAL_IP", None)
    done = subprocess.run([sys.executable, "-c", _WITH_UI], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sockets = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(sockets) >= 3  # py4j, driver, block manager, UI (4040 or the next free port)
    assert all(ipaddress.ip_address(s.rsplit(":", 1)[0]).is_loopback for s in sockets), sockets
