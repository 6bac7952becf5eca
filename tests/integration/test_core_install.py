"""goka-py installed without extras, as a web app that only emits installs it: the wheel in a
fresh virtualenv, emitting to the embedded broker and unit-testing a group with the tester."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys, time
    started = time.perf_counter()
    import goka
    import_ms = (time.perf_counter() - started) * 1000
    from goka import Emitter, JsonCodec, Int64Codec, StringCodec, define_group, input, persist
    from goka.grpc import ViewClient
    from goka.tester import Tester

    def count(ctx, msg):
        ctx.set_value((ctx.value() or 0) + 1)

    tester = Tester(define_group("clicks", input("user-clicks", StringCodec(), count),
                                 persist(Int64Codec())))
    for _ in range(3):
        tester.consume("user-clicks", "user-1", "/home")
    with Emitter(sys.argv[1], sys.argv[2], JsonCodec()) as emitter:
        delivery = emitter.emit_sync("user-1", {"page": "/home"}, timeout=30)
    missing = {}
    for name, part in (("plyvel", "goka.storage.leveldb"), ("pyspark", "goka.spark"),
                       ("grpc_health", "goka.grpc.server")):
        try:
            __import__(name)
            missing[name] = "installed"
        except ImportError:
            try:
                __import__(part)
                missing[name] = "importable"
            except ImportError as exc:
                missing[name] = str(exc)
    print(json.dumps({"import_ms": import_ms, "count": tester.table_value("clicks-table", "user-1"),
                      "offset": delivery.offset, "missing": missing,
                      "client": ViewClient.__name__}))
""")


def test_the_core_alone_emits_and_tests_groups(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (wheel,) = wheels.glob("goka_py-*.whl")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)],
                               capture_output=True, text=True, timeout=600)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    topic = new_topic(partitions=2)
    result = subprocess.run([str(python), "-c", SCRIPT, brokers, topic], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["count"] == 3 and found["offset"] >= 0 and found["client"] == "ViewClient"
    assert found["missing"] == {
        "plyvel": "LevelDB storage: plyvel is not installed; pip install 'goka-py[view]' "
        "(or 'goka-py[all]')",
        "pyspark": "processors on Spark: pyspark is not installed; pip install "
        "'goka-py[spark]' (or 'goka-py[all]')",
        "grpc_health": "the gRPC view server: grpcio-health-checking is not installed; pip "
        "install 'goka-py[view]' (or 'goka-py[all]')",
    }
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not names & {"pyspark", "pandas", "pyarrow", "numpy", "plyvel", "httpx", "authlib"}
    size_mb = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file()) / 1e6
    print(f"core-only virtualenv: {size_mb:.0f} MB; import goka {found['import_ms']:.0f} ms")
    assert size_mb < 100, size_mb
