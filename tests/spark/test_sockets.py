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

from tests.spark.procs import descendants, listening

pytestmark = pytest.mark.spark


def test_a_local_session_listens_on_loopback_only(spark: Any) -> None:
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()  # Python workers
    jvm = spark.sparkContext._gateway.proc.pid
    sockets = listening(descendants(jvm))
    assert sockets, "found no listening socket of the Spark JVM: is /proc readable?"
    exposed = [s for s in sockets if not ipaddress.ip_address(s.rsplit(":", 1)[0]).is_loopback]
    assert exposed == [], f"listening beyond loopback: {exposed} (all: {sockets})"


_WITH_UI = """
import json, sys
from goka.spark import SessionSettings, build_session
from tests.spark.procs import descendants, listening
session = build_session("goka-ui", "local[1]", settings=SessionSettings(ui=True))
print(json.dumps(listening(descendants(session.sparkContext._gateway.proc.pid))))
session.stop()
"""


def test_the_spark_ui_when_asked_for_listens_on_loopback_too(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("SPARK_LOCAL_IP", None)
    done = subprocess.run([sys.executable, "-c", _WITH_UI], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sockets = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(sockets) >= 3  # py4j, driver, block manager, UI (4040 or the next free port)
    assert all(ipaddress.ip_address(s.rsplit(":", 1)[0]).is_loopback for s in sockets), sockets
