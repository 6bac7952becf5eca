"""Go Goka in the tests: ``tests/interop/go`` (lovoo/goka, pinned in its go.mod) built once into a
cache, and run as a child process that emits, counts as a processor group, or dumps a view.

The build needs the Go toolchain and the Go module proxy (``go build`` downloads the pinned
modules the first time, as test set-up); where no ``go`` is found, the tests that need it skip
and say why. Records cross to the Go program hex-encoded, a line each (see its main.go), so any
key bytes and nil values survive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SOURCES = Path(__file__).resolve().parent / "go"
#: The lovoo/goka release the program is built with (its go.mod's).
GOKA_VERSION = "v1.1.17"


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256()
    for path in sorted(SOURCES.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return Path(base) / "goka-py" / "go-interop" / digest.hexdigest()[:16]


def build() -> Path:
    """The built program (built if its sources changed since the cached one)."""
    binary = _cache() / "goka-interop"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain (`go` on PATH): Go Goka cannot be built")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent) as scratch:
        built = Path(scratch) / "goka-interop"
        result = subprocess.run([go, "build", "-mod=readonly", "-o", str(built), "."],
                                cwd=SOURCES, capture_output=True, text=True, timeout=600)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"building Go Goka failed:\n{result.stderr[-3000:]}")
        os.replace(built, binary)  # (another pytest worker may have built it meanwhile)
    return binary


def encode(records: Iterable[tuple[bytes, bytes | None]]) -> str:
    """Records as the program reads them."""
    return "".join(f"{k.hex()} {'-' if v is None else v.hex()}\n" for k, v in records)


class GoGoka:
    """The Go program, run against ``brokers``."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def _command(self, verb: str, brokers: str, **flags: str) -> list[str]:
        return [str(self.binary), verb, "--brokers", brokers,
                *(f"--{k}={v}" for k, v in flags.items())]  # fmt: skip

    def emit(self, brokers: str, topic: str, records: Iterable[tuple[bytes, bytes | None]],
             codec: str = "string") -> None:  # fmt: skip
        """Emit ``records`` (raw key, encoded value or None) with goka's Emitter."""
        data = encode(records)
        done = subprocess.run(self._command("emit", brokers, topic=topic, codec=codec),
                              input=data, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    def view(self, brokers: str, table: str, codec: str = "int64") -> dict[bytes, bytes]:
        """Every key of ``table`` and its encoded value, as a goka View has them."""
        done = subprocess.run(self._command("view", brokers, topic=table, codec=codec),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        found = {}
        for line in done.stdout.splitlines():
            key, value = line.split(" ")
            found[bytes.fromhex(key)] = bytes.fromhex(value)
        return found

    def count(self, brokers: str, group: str, topic: str) -> Any:
        """Run goka processor ``group`` counting ``topic``'s records per key (Int64 table);
        it is ready (partitions claimed, table recovered) when this enters; stopped (its
        offsets committed) when this exits."""
        return self._group(self._command("count", brokers, group=group, topic=topic))

    def sum(self, brokers: str, group: str, topic: str, table: str, edge: str) -> Any:
        """Run goka processor ``group`` summing, per key of ``topic``'s records, the key's
        value in ``table`` (Int64), which it joins or looks up (``edge``); as :meth:`count`."""
        return self._group(self._command("sum", brokers, group=group, topic=topic, table=table,
                                         edge=edge))  # fmt: skip

    def pages(self, brokers: str, group: str, topic: str) -> Any:
        """Run goka processor ``group`` looping each record of ``topic`` back under its value
        (a page) and counting per page in the loop; as :meth:`count`."""
        return self._group(self._command("pages", brokers, group=group, topic=topic))

    @contextmanager
    def _group(self, command: list[str]) -> Iterator[subprocess.Popen[str]]:
        with tempfile.TemporaryFile("w+") as log, subprocess.Popen(
            command,
            stdout=subprocess.PIPE, stderr=log, text=True,
        ) as process:  # fmt: skip
            try:
                assert process.stdout is not None
                line = process.stdout.readline()
                if line.strip() != "ready":
                    log.seek(0)
                    raise AssertionError(f"Go Goka's group did not start: {log.read()[-3000:]}")
                yield process
            finally:
                process.terminate()
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.fixture(scope="session")
def go_goka() -> GoGoka:
    """Go Goka (lovoo/goka, built once per source change; skips where Go is missing)."""
    return GoGoka(build())
