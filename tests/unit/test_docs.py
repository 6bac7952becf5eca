"""The documentation: generated pages current, the site builds strictly, metric names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def test_reference_pages_are_current() -> None:
    """docs/cli.md and docs/metrics.md are what `python -m tools.gen_docs` writes."""
    check = subprocess.run([sys.executable, "-m", "tools.gen_docs", "--check"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_metric_names_and_labels_follow_prometheus_conventions() -> None:
    import goka.grpc.metrics as grpc_metrics
    import goka.metrics as core
    import goka.spark.metrics as spark_metrics

    core.register()
    view = core.view_metrics("docs-check")
    view.state("catching up")
    grpc_metrics._families()
    spark_metrics._families()
    families = [f for f in REGISTRY.collect() if f.name.startswith("goka_")]
    assert len(families) >= 25
    units = ("_seconds", "_bytes", "_records", "_offset", "_streams", "_state")
    for family in families:
        assert re.fullmatch(r"goka_[a-z]+(_[a-z]+)+", family.name), family.name
        if family.type == "gauge":
            assert family.name.endswith(units), f"{family.name}: no unit suffix"
        for sample in family.samples:
            for value in sample.labels.values():
                assert " " not in str(value), f"{sample.name}{sample.labels}"
    documented = (ROOT / "docs" / "metrics.md").read_text()
    for family in families:
        assert f"`{family.name}" in documented, family.name


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--quiet",
         "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    context = (tmp_path / "site" / "concepts" / "index.html").read_text()
    for method in ("set_value", "loopback", "lookup", "emit", "delete"):
        assert method in context, method
    assert "goka processor run" in (tmp_path / "site" / "cli" / "index.html").read_text()
