"""Containers of the project's image, run with buildah (no Docker engine runs on
these machines): ``buildah from`` the image, then ``buildah run`` its entrypoint with the
image's user, working directory and environment, on the host's network (chroot isolation: no
network or PID namespace of its own). A stop is what ``docker stop`` does: SIGTERM to the
container's main process (buildah run does not pass signals on), SIGKILL after the grace
period."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from examples.click_count.demo import descendants

__all__ = ["Container", "buildah_problem"]


def buildah_problem() -> str | None:
    """Why buildah cannot build and run containers here (None: it can)."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (make test installs it: apt-get install buildah)"
    if os.geteuid() != 0:
        return "buildah runs containers with chroot isolation as root only"
    done = subprocess.run(["buildah", "info"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"buildah info failed: {done.stderr.strip()[-500:]}"
    return None


class Container:
    """One container of ``image`` running its entrypoint with ``args`` (output in ``log``).

    Args:
        image: the image name.
        args: the arguments after the entrypoint (the image's CMD is not used).
        log: the file the container's output goes to.
        volumes: host path -> path in the container.
        env: environment variables besides the image's.
        entrypoint: instead of the image's entrypoint.
    """

    def __init__(self, image: str, args: list[str], *, log: Path,
                 volumes: dict[Path, str] | None = None,
                 env: dict[str, str] | None = None,
                 entrypoint: list[str] | None = None) -> None:  # fmt: skip
        self.name, self.log = f"goka-test-{uuid.uuid4().hex[:12]}", log
        subprocess.run(["buildah", "from", "--pull=never", "--name", self.name, image],
                       check=True, capture_output=True)  # fmt: skip
        config = json.loads(subprocess.run(
            ["buildah", "inspect", "--type", "container", self.name], check=True,
            capture_output=True, text=True).stdout)  # fmt: skip
        if entrypoint is None:
            entrypoint = config["OCIv1"]["config"].get("Entrypoint") or []
        # the host's network and its name, which resolves there as with docker --network host
        # (a name of its own did not: Spark looks it up where AWS variables are set)
        command = ["buildah", "run", "--isolation", "chroot", "--network", "host", "--uts", "host"]
        for host, inside in (volumes or {}).items():
            command += ["--volume", f"{host}:{inside}"]
        for key, value in (env or {}).items():
            command += ["--env", f"{key}={value}"]
        self.started = time.monotonic()
        with log.open("wb") as out:
            self.process = subprocess.Popen([*command, self.name, "--", *entrypoint, *args],
                                            stdout=out, stderr=subprocess.STDOUT)  # fmt: skip

    def main_pid(self) -> int | None:
        """The host PID of the container's main process (the entrypoint), or None."""
        for pid in descendants(self.process.pid):
            if _name(pid) == "buildah-chroot-exec":
                below = descendants(pid)
                return below[0] if below else None
        return None

    def stop(self, grace: float) -> tuple[int, float]:
        """SIGTERM the main process; SIGKILL everything after ``grace`` seconds. Return the
        exit code (of the entrypoint, as buildah run reports it) and the seconds it took.

        Raises:
            AssertionError: the container did not stop within ``grace``.
        """
        pid, started = self.main_pid(), time.monotonic()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            code = self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {grace} s of SIGTERM: "
                                 f"{self.output()[-3000:]}") from None  # fmt: skip
        return code, time.monotonic() - started

    def kill(self) -> None:
        """Kill the container's processes (idempotent)."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)

    def remove(self) -> None:
        """Kill what still runs, then remove the container (idempotent)."""
        if self.process.poll() is None:
            self.kill()
        subprocess.run(["buildah", "rm", self.name], capture_output=True, check=False)

    def output(self) -> str:
        """What the container printed so far."""
        return self.log.read_text(errors="replace")

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _name(pid: int) -> str:
    """The program ``pid`` runs (its first argument: ``comm`` is cut at 15 characters)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, UnicodeDecodeError):
        return ""
