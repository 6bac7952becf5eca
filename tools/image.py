"""Build the Dockerfile's image: ``python -m tools.image [--target full|slim] [--tag NAME]``
(``make image``).

The builder is Docker where a Docker engine answers, else podman where it answers,
else buildah (Debian's package; ``make image`` installs it), which needs no daemon: it builds
with ``--isolation chroot``. The base image (the Dockerfile's ``FROM``) is used if the builder
has it, else pulled; where it cannot be pulled (a machine that reaches Debian's mirror and
PyPI but no image registry), a *stand-in* is made once with ``debootstrap`` and tagged under
the base's name, and the Dockerfile is built unchanged on top of it with ``--pull=never``.

The stand-in for ``python:3.11-slim-bookworm``: Debian 12 (``debootstrap --variant=minbase``)
with Debian's Python 3.11 (``python3``, ``python3-pip``, ``python3-venv``), linked as
``/usr/local/bin/python``, ``python3``, ``pip`` and ``pip3`` as in the official image, the
Python headers (so packages with C extensions build, as on the official image), no
``EXTERNALLY-MANAGED`` marker (pip installs into the system, as in the official image),
``ca-certificates``, ``netbase`` and ``tzdata``; ``PATH`` and ``LANG=C.UTF-8`` set as there.
It differs in: Python 3.11.2 (Debian's) instead of the newest 3.11 release built from source;
packages land in ``/usr/local/lib/python3.11/dist-packages`` (not ``site-packages``); pip
23.0.1; about 200 MB larger (Debian's Python is split into more packages and minbase keeps
apt's caches).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = "python:3.11-slim-bookworm"
MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: The image tag each target gets unless another is given.
TAGS = {"full": "localhost/goka-py:latest", "slim": "localhost/goka-py:slim"}
#: Marks a stand-in base image (its label's value: how it was made).
STAND_IN_LABEL = "org.goka-py.stand-in"

__all__ = ["BASE", "TAGS", "build", "builder", "stand_in"]


class ImageError(RuntimeError):
    """The image could not be built (the message says which step and why)."""


def _answers(*command: str) -> bool:
    if shutil.which(command[0]) is None:
        return False
    try:
        done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def builder() -> str:
    """The build tool: ``docker`` or ``podman`` (where it answers), else ``buildah``.

    Raises:
        ImageError: none of them is usable.
    """
    for tool in ("docker", "podman"):
        if _answers(tool, "info"):
            return tool
    if _answers("buildah", "--version"):
        return "buildah"
    raise ImageError("no image builder: install buildah (apt-get install buildah debootstrap), "
                     "podman or Docker")  # fmt: skip


def _run(
    step: str, command: list[str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise ImageError(f"{step} failed ({' '.join(command[:4])} ...): "
                         f"{(done.stderr or done.stdout)[-2000:]}")  # fmt: skip
    return done


def has_image(tool: str, name: str) -> bool:
    """Does ``tool``'s local storage hold image ``name``?"""
    if tool == "buildah":
        return _answers("buildah", "inspect", "--type", "image", name)
    return _answers(tool, "image", "inspect", name)


def stand_in(name: str = BASE, *, log: bool = True) -> None:
    """Make the stand-in for ``name`` (see the module docstring) in buildah's storage."""
    if shutil.which("debootstrap") is None:
        raise ImageError("the base image cannot be pulled and debootstrap is missing to make a "
                         "stand-in: apt-get install debootstrap")  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="goka-stand-in-") as work:
        rootfs, tarball = Path(work) / "rootfs", Path(work) / "rootfs.tar"
        _run("debootstrap", ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), MIRROR])
        _run("packing the root file system", ["tar", "-C", str(rootfs), "-cf", str(tarball), "."])
        container = _run("buildah from scratch", ["buildah", "from", "scratch"]).stdout.strip()
        try:
            _run("adding the root file system", ["buildah", "add", container, str(tarball), "/"])
            _run("installing Python", ["buildah", "run", "--isolation", "chroot", "--network",
                                       "host", container, "--",
                                       "sh", "-c", _PYTHON_LAYOUT])  # fmt: skip
            _run("configuring", ["buildah", "config", "--env", f"PATH={_PATH}", "--env",
                                 "LANG=C.UTF-8", "--cmd", '["python3"]', "--label",
                                 f"{STAND_IN_LABEL}=debootstrap minbase bookworm",
                                 container])  # fmt: skip
            _run("committing", ["buildah", "commit", "--rm", container, _qualified(name)])
        except BaseException:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
            raise
    if log:
        print(f"stand-in for {name} made in {time.monotonic() - started:.0f} s", file=sys.stderr)


_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian's Python laid out as the official image's: python/pip in /usr/local/bin, the headers,
# no EXTERNALLY-MANAGED marker
_PYTHON_LAYOUT = """set -e
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-pip python3-venv \
    ca-certificates netbase tzdata
cd /tmp
apt-get download -q libpython3.11-dev
dpkg -x libpython3.11-dev_*.deb /tmp/dev
cp -r /tmp/dev/usr/include/. /usr/include/
rm -rf /tmp/dev /tmp/*.deb /var/lib/apt/lists/* /var/cache/apt/*.bin
rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 /usr/local/bin/python
ln -sf /usr/bin/python3 /usr/local/bin/python3
ln -sf /usr/bin/pip3 /usr/local/bin/pip
ln -sf /usr/bin/pip3 /usr/local/bin/pip3
"""


def _qualified(name: str) -> str:
    """``name`` as Docker Hub's full name (what ``FROM name`` resolves to)."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def ensure_base(tool: str, name: str = BASE) -> str:
    """Make sure ``tool`` has the base image: there, pulled, or a stand-in (buildah only);
    return which."""
    if has_image(tool, name):
        return "present"
    pull = [tool, "pull", "-q", name]
    try:
        if subprocess.run(pull, capture_output=True, timeout=120, check=False).returncode == 0:
            return "pulled"
    except subprocess.TimeoutExpired:
        pass
    if tool != "buildah":
        raise ImageError(f"{tool} cannot pull {name}; make the image with buildah instead "
                         "(GOKA_IMAGE_BUILDER=buildah) to build on a stand-in")  # fmt: skip
    stand_in(name)
    return "stand-in"


def build(
    target: str = "full", tag: str | None = None, *, tool: str | None = None, quiet: bool = False
) -> str:
    """Build ``target`` of the Dockerfile, tagged ``tag``, with ``tool`` (default:
    ``$GOKA_IMAGE_BUILDER`` or :func:`builder`); return the tag. ``quiet``: the builder's
    output only in an error.

    Raises:
        ImageError: a step failed (its output is in the message).
    """
    if target not in TAGS:
        raise ImageError(f"unknown target {target!r}: {', '.join(TAGS)}")
    tool = tool or os.environ.get("GOKA_IMAGE_BUILDER") or builder()
    tag = tag or TAGS[target]
    ensure_base(tool, BASE)
    if tool == "buildah":
        # (--jobs: the wheel's and the requirements' stages beside the base's: 10-15 s sooner
        # on a cold cache)
        command = ["buildah", "bud", "--layers", "--jobs", "2", "--pull=never", "--isolation",
                   "chroot", "--network", "host"]  # fmt: skip
        if Path(CA_BUNDLE).exists():  # the machine's certificates: pip reaches PyPI as here
            command += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    else:
        command = [tool, "build"]
    command += ["--target", target, "-t", tag, str(ROOT)]
    if quiet:
        _run(f"building {target}", command, cwd=ROOT)
    elif subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
        raise ImageError(f"building {target} failed: {' '.join(command)}")
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.image", description=__doc__.split(
        "\n\n")[0])  # fmt: skip
    parser.add_argument("--target", choices=sorted(TAGS), default="full")
    parser.add_argument("--tag", help="image name (default: localhost/goka-py:latest, "
                                      "localhost/goka-py:slim for the slim target)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        print(build(args.target, args.tag))
    except ImageError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
