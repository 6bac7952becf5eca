"""Spark's JVM is started without Python between fork and exec (goka.spark.gateway): from a
process busy with gRPC, a session starts and works, and its JVM ignores SIGINT as PySpark
meant it to."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..helpers import GRPC_BUSY

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

BUSY_THEN_SPARK = GRPC_BUSY + textwrap.dedent("""
    from pyspark import java_gateway
    from goka.spark import build_session
    from goka.spark.gateway import start_without_python_in_child

    assert java_gateway.Popen is start_without_python_in_child
    spark = build_session("gateway-test", "local[1]")
    assert spark.range(3).count() == 3
    jvm = spark.sparkContext._gateway.proc.pid
    ignored = int(dict(line.split(":", 1) for line in open(f"/proc/{jvm}/status"))["SigIgn"], 16)
    print("sigint-ignored", bool(ignored & (1 << 1)), flush=True)
    spark.stop()
    server.stop(0)
""")


def test_a_session_starts_from_a_process_busy_with_grpc(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", BUSY_THEN_SPARK], cwd=tmp_path, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sigint-ignored True" in done.stdout
