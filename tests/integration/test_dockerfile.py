"""The Dockerfile's install and entrypoint steps, run in a fresh virtualenv (no Docker engine
runs here): WORKDIR and COPY work in a scratch directory standing for the image's /, the cd, pip
and python steps of RUN lines run with the venv's Python (apt-get and rm steps are skipped: this
machine has gcc already), and the ENTRYPOINT runs with the CMD and with the sub-commands the image
is used for."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    steps, pending = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            steps.append((word.upper(), rest.strip()))
            pending = ""
    return steps


def test_dockerfile_install_and_entrypoint_work(tmp_path: Path) -> None:
    root, venv = tmp_path / "image", tmp_path / "venv"  # root stands for the image's /
    app = root / "app"
    root.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(app),  # the image's ENV PYTHONPATH=/app
        "GOKA_SPARK_CDS": str(tmp_path / "classes.jsa"),  # the warm-up's archive: not in ~
    }
    env.pop("VIRTUAL_ENV", None)
    entrypoint: list[str] = []
    command: list[str] = []
    workdir = root
    for word, rest in instructions():
        if word == "WORKDIR":
            workdir = root / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            *sources, destination = rest.split()
            for source in sources:
                target = workdir / destination
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))  # fmt: skip
                else:
                    shutil.copy(ROOT / source, target)
        elif word == "RUN":
            cwd = workdir
            for step in rest.split("&&"):
                args = shlex.split(step)
                if args[0] == "cd":
                    cwd = root / args[1].lstrip("/")
                    continue
                if args[0] == "pip":
                    args = [str(bin_dir / "python"), "-m", *args]
                elif args[0] == "python":
                    args = [str(bin_dir / "python"), *args[1:]]
                else:  # apt-get and rm need root and Debian; this machine has gcc already
                    continue
                run = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                                     timeout=1200)  # fmt: skip
                assert run.returncode == 0, f"{step}: {run.stderr[-3000:]}"
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif word == "CMD":
            command = json.loads(rest)
    assert entrypoint == ["goka"], entrypoint
    goka = [str(bin_dir / entrypoint[0])]
    assert "processor" in subprocess.run(goka + command, env=env, capture_output=True, text=True,
                                         check=True).stdout  # fmt: skip
    for sub in (["processor", "run", "--help"], ["view", "serve", "--help"], ["--version"]):
        subprocess.run(goka + sub, env=env, capture_output=True, check=True)
    with subprocess.Popen([*goka, "broker"], env=env, stdout=subprocess.PIPE, text=True) as broker:
        assert broker.stdout is not None
        assert "bootstrap servers: 127.0.0.1:" in broker.stdout.readline()
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
    imported = subprocess.run(
        [str(bin_dir / "python"), "-c", "import examples.click_count.web, services.view, services.processor, goka.spark, goka.emitter; print(goka.emitter.__file__, goka.emitter.speedups is not None)"],
        env=env, capture_output=True, text=True, cwd=root,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert (tmp_path / "classes.jsa").stat().st_size > 50_000_000  # the RUN warm-up wrote it
    where, fast = imported.stdout.split()
    assert where.startswith(str(venv)), where  # the installed package, not a source tree
    assert fast == "True"  # with its C fast path
