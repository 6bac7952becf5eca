"""The package builds with and without a C compiler (the C fast path is optional)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def build_wheel(tmp_path: Path, **env: str) -> list[str]:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "goka", source / "goka",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))  # fmt: skip
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(source)],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("goka_py-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_wheel_carries_the_c_fast_path(tmp_path: Path) -> None:
    names = build_wheel(tmp_path)
    assert any(n.startswith("goka/_speedups.") and n.endswith(".so") for n in names), names
    assert "goka/_speedups.pyi" in names


def test_without_a_c_compiler_the_build_goes_on_without_it(tmp_path: Path) -> None:
    names = build_wheel(tmp_path, CC="false")
    assert "goka/emitter/__init__.py" in names
    assert not any(n.endswith(".so") for n in names), names
