"""A Java peer's build: a folder with a pom naming its dependencies and its sources under
``src/``, built once into ``$XDG_CACHE_HOME/goka-py/<name>/<hash of the sources>/``.

The build resolves the pom's runtime dependencies with ``mvn dependency:copy-dependencies``
(no other Maven plugin is fetched, nor test-scoped dependencies) into ``libs/`` and compiles
the sources with ``javac`` into ``classes/``: later runs need neither Maven nor the network.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from goka.dev.kafka import cache_root, fill_cache, find_java
from goka.errors import BrokerNotFoundError


class PeerUnavailable(RuntimeError):
    """A peer cannot be built here: what is missing and what to install."""


def _cache(sources: Path, name: str) -> Path:
    digest = hashlib.sha256()
    for path in sorted(p for p in sources.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(sources)).encode() + b"\0" + path.read_bytes())
    return cache_root() / name / digest.hexdigest()[:16]


def build(sources: Path, name: str, what: str) -> Path:
    """The built peer's folder (``libs/``, ``classes/``), built if its sources changed;
    ``what`` names it in errors.

    Raises:
        PeerUnavailable: no ``mvn`` or ``javac``, or Maven could not resolve the pom.
    """
    built = _cache(sources, name)
    if built.is_dir():
        return built
    try:
        java = Path(find_java())
    except BrokerNotFoundError as absent:
        raise PeerUnavailable(str(absent)) from absent
    javac = java.with_name("javac") if java.with_name("javac").exists() else shutil.which("javac")
    mvn = shutil.which("mvn")
    if mvn is None or javac is None:
        missing = "Maven (apt-get install maven)" if mvn is None else "a JDK's javac"
        raise PeerUnavailable(f"building {what} needs {missing}")

    def make(work: Path) -> None:
        fetch = [mvn, "-q", "-B", "-f", str(sources / "pom.xml"), "dependency:copy-dependencies",
                 f"-DoutputDirectory={work / 'libs'}", "-DincludeScope=runtime"]  # fmt: skip
        compile_ = [str(javac), "-d", str(work / "classes"), "-cp", str(work / "libs" / "*"),
                    *map(str, sources.rglob("*.java"))]  # fmt: skip
        for command in (fetch, compile_):
            done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                                  check=False)  # fmt: skip
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
                raise PeerUnavailable(f"building {what} failed "
                                      f"({' '.join(command[:4])} ...):\n{tail}")  # fmt: skip

    return fill_cache(built, make)


def classpath(built: Path) -> str:
    """The class path of a built peer."""
    return f"{built / 'classes'}:{built / 'libs' / '*'}"


def run(built: Path, main: str, arguments: Mapping[str, object], *, what: str, figures: str,
        timeout: float) -> tuple[dict[str, int], str]:  # fmt: skip
    """Run a built peer's ``main`` with ``name=value`` ``arguments``; return the figures of
    the last stdout line starting with ``figures`` (``name=number`` pairs), and its stderr.

    Raises:
        RuntimeError: it failed, or printed no such line (``what`` names it).
    """
    command = [find_java(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp",
               classpath(built), main, *(f"{k}={v}" for k, v in arguments.items())]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith(figures)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stdout[-1500:]}\n"
                           f"{done.stderr[-3000:]}")  # fmt: skip
    return {k: int(v) for k, v in (pair.split("=", 1) for pair in lines[-1].split())}, done.stderr
