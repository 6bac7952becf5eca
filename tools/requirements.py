"""The requirements of goka-py with some extras, from pyproject.toml alone (self-references
such as ``goka-py[spark,view]`` resolved): ``python requirements.py [pyproject.toml] view,web``
prints one requirement a line. The Dockerfile installs them in a layer that only a change of
pyproject.toml rebuilds; the wheel of the code goes on top with ``--no-deps``."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_SELF = re.compile(r"^goka-py\[(?P<extras>[^\]]*)\]$")


def requirements(project: dict[str, object], extras: list[str]) -> list[str]:
    """The core's requirements and those of ``extras``, in order, each once."""
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    found: list[str] = []
    seen: set[str] = set()

    def add(requirement: str) -> None:
        match = _SELF.match(requirement.replace(" ", ""))
        if match is not None:
            for extra in match["extras"].split(","):
                take(extra)
        elif requirement not in found:
            found.append(requirement)

    def take(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}")
        seen.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    core = project.get("dependencies", [])
    assert isinstance(core, list)
    for requirement in core:
        add(requirement)
    for extra in extras:
        take(extra)
    return found


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if len(argv) > 1 else Path("pyproject.toml")
    extras = [e for e in argv[-1].split(",") if e] if argv else []
    project = tomllib.loads(path.read_text())["project"]
    print("\n".join(requirements(project, extras)))


if __name__ == "__main__":
    main(sys.argv[1:])
