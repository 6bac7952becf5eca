"""tools/requirements.py: what the Dockerfile installs before the code, from pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tools.requirements import requirements

PROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
    "project"
]


def test_extras_and_self_references_resolve_to_each_requirement_once() -> None:
    slim = requirements(PROJECT, ["view", "schema-registry", "web"])
    full = requirements(PROJECT, ["all"])
    assert slim[: len(PROJECT["dependencies"])] == PROJECT["dependencies"]  # the core first
    assert not any(r.startswith(("pyspark", "goka-py")) for r in slim)
    assert set(slim) <= set(full) and len(full) == len(set(full))  # plyvel is in two extras
    for extra in ("spark", "view", "schema-registry", "broker", "web", "postgres"):
        assert set(PROJECT["optional-dependencies"][extra]) <= set(full), extra
    assert not any(r.startswith("goka-py") for r in full)


def test_an_unknown_extra_is_refused() -> None:
    with pytest.raises(SystemExit, match="no extra 'nope'"):
        requirements(PROJECT, ["nope"])
