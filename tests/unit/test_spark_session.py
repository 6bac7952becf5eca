"""The driver JVM's options (goka's log4j file and the class-data archive where there is one)
and the Spark home of a local session."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from goka.cli import build_parser
from goka.commands.processor import _session
from goka.spark.class_data import prune
from goka.spark.session import (
    JAVA_OPTIONS,
    LOG4J,
    SessionSettings,
    cds_archive,
    java_options,
    spark_home,
)


def test_the_archive_is_used_where_it_exists(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    settings = SessionSettings(class_data=str(archive))
    assert cds_archive(setting=settings.class_data) == archive
    assert "SharedArchiveFile" not in java_options(settings=settings)  # not written yet
    archive.write_bytes(b"x")
    options = java_options(settings=settings)
    assert f"-XX:SharedArchiveFile={archive} -Xlog:cds=off" in options
    assert options.startswith(JAVA_OPTIONS) and f"={LOG4J}" in options
    writing = SessionSettings(class_data=str(archive),
                              java_options=f"-XX:ArchiveClassesAtExit={tmp_path}/new")  # fmt: skip
    assert "SharedArchiveFile" not in java_options(settings=writing)  # not reading one too


def test_the_archive_can_be_turned_off() -> None:
    off = SessionSettings(class_data=None)
    assert cds_archive(setting=None) is None
    assert "SharedArchiveFile" not in java_options(settings=off)


def test_the_command_line_takes_the_session_s_settings_from_flags_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variables = {"GOKA_SPARK_CDS": "off", "GOKA_SPARK_JAVA_OPTIONS": "-Xmx1g",
                 "GOKA_SPARK_LOG4J": "/etc/log4j2.xml", "GOKA_SPARK_UI": "1",
                 "GOKA_SPARK_MASTER": "local[3]"}  # fmt: skip
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["processor", "run", "g:graph"])
    assert _session(args) == SessionSettings("local[3]", True, "-Xmx1g", None, "/etc/log4j2.xml")
    args = build_parser().parse_args(["processor", "run", "g:graph", "--master", "local[1]"])
    assert _session(args).master == "local[1]"
    for name in variables:
        monkeypatch.delenv(name)
    assert _session(build_parser().parse_args(["processor", "run", "g:graph"])) == (
        SessionSettings()
    )


def test_each_pyspark_install_has_its_own_archive() -> None:
    found = cds_archive()
    assert found is not None and found.parent == Path.home() / ".cache" / "goka-py"
    assert found.name.startswith("spark-") and found.suffix == ".jsa"


def test_a_local_session_s_spark_home_is_the_install_without_its_python_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python processes' path:
    without it they import the interpreter's pyspark, whose bytecode is cached."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    install = Path(pyspark.__file__).parent
    home = spark_home()
    assert home.parent == tmp_path / ".cache" / "goka-py" and home.name.startswith("spark-home-")
    assert {e.name for e in home.iterdir()} == {e.name for e in install.iterdir()} - {"python"}
    assert (home / "jars").resolve() == (install / "jars").resolve()
    assert (home / "bin" / "spark-submit").is_file()
    assert spark_home() == home  # made once
    assert [e.name for e in home.parent.iterdir()] == [home.name]  # nothing left half-built


def test_a_spark_home_of_the_user_s_own_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert spark_home() == Path("/opt/spark")


def test_where_no_spark_home_can_be_made_the_install_is_the_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("HOME", str(tmp_path / "file"))
    assert spark_home() == Path(pyspark.__file__).parent


def test_an_archive_fits_one_spark_home() -> None:
    first, second = cds_archive(Path("/a")), cds_archive(Path("/b"))
    assert first is not None and second is not None
    assert first != second and first.parent == second.parent


def test_archives_and_spark_homes_no_install_uses_are_pruned(tmp_path: Path) -> None:
    install = str(Path(pyspark.__file__).parent)
    archive = tmp_path / "spark-now.jsa"
    kept = {archive: install, tmp_path / "spark-other-venv.jsa": str(tmp_path)}
    pruned = {tmp_path / "spark-old-classpath.jsa": install, tmp_path / "spark-gone.jsa": "/gone"}
    for path, noted in {**kept, **pruned}.items():
        path.write_bytes(b"x")
        Path(f"{path}.install").write_text(noted)
    (tmp_path / "spark-home-gone").mkdir()
    (tmp_path / "spark-home-gone" / "jars").symlink_to("/gone/jars")
    (tmp_path / "spark-home-here").mkdir()
    (tmp_path / "spark-home-here" / "jars").symlink_to(Path(install) / "jars")
    prune(archive)
    assert all(path.is_file() for path in kept) and not any(p.exists() for p in pruned)
    assert not any(Path(f"{path}.install").exists() for path in pruned)
    assert not (tmp_path / "spark-home-gone").exists()
    assert (tmp_path / "spark-home-here" / "jars").is_dir()
