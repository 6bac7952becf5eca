"""The driver JVM's options: goka's log4j file and the class-data archive where there is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from goka.spark.session import LOG4J, cds_archive, java_options


def test_the_archive_is_used_where_it_exists(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:  # fmt: skip
    archive = tmp_path / "classes.jsa"
    monkeypatch.setenv("GOKA_SPARK_CDS", str(archive))
    monkeypatch.delenv("GOKA_SPARK_JAVA_OPTIONS", raising=False)
    assert cds_archive() == archive
    assert "SharedArchiveFile" not in java_options()  # not written yet
    archive.write_bytes(b"x")
    options = java_options()
    assert f"-XX:SharedArchiveFile={archive} -Xlog:cds=off" in options
    assert options.startswith("-XX:TieredStopAtLevel=1") and f"={LOG4J}" in options
    monkeypatch.setenv("GOKA_SPARK_JAVA_OPTIONS", f"-XX:ArchiveClassesAtExit={tmp_path}/new")
    assert "SharedArchiveFile" not in java_options()  # writing one: not reading one too


def test_the_archive_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOKA_SPARK_CDS", "off")
    assert cds_archive() is None and "SharedArchiveFile" not in java_options()


def test_each_pyspark_install_has_its_own_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOKA_SPARK_CDS", raising=False)
    found = cds_archive()
    assert found is not None and found.parent == Path.home() / ".cache" / "goka-py"
    assert found.name.startswith("spark-") and found.suffix == ".jsa"
