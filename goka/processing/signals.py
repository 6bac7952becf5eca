"""What the driver and the tasks of a processor tell each other through files beside the
checkpoint (a path or an fsspec URL, shared by every executor as the checkpoint is): a request
to stop (:class:`StopSignal`) and what partitions are doing while they recover
(:class:`PartitionBoard`)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from goka.storage.urls import filesystem

__all__ = ["PartitionBoard", "StopSignal"]


class StopSignal:
    """A run's request to stop: a file at a path or fsspec URL that the driver creates and the
    tasks of an epoch look for, at most every ``every`` seconds.

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(self, url: str, every: float = 0.2) -> None:
        self.url, self.every = url, every
        self._next = 0.0
        self._set = False
        self._fs, self._path = filesystem(url, local_as_none=True)

    def __call__(self) -> bool:
        """Whether the stop was asked for (checked at most every ``every`` seconds)."""
        now = time.monotonic()
        if not self._set and now >= self._next:
            self._next = now + self.every
            self._set = self._exists()
        return self._set

    def _exists(self) -> bool:
        if self._fs is None:
            return os.path.exists(self._path)
        return bool(self._fs.exists(self._path))

    def set(self) -> None:
        """Ask the tasks to stop."""
        if self._fs is None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            Path(self._path).touch()
        else:
            self._fs.pipe(self._path, b"stop")

    def clear(self) -> None:
        """Withdraw the request (a new run starts)."""
        with contextlib.suppress(FileNotFoundError):
            if self._fs is None:
                os.unlink(self._path)
            elif self._fs.exists(self._path):
                self._fs.rm(self._path)


class PartitionBoard:
    """Where tasks say what their partitions are doing (``restoring`` or ``rebuilding`` a store,
    how many of how many records, then ``running``) and the driver's monitor reads it: one
    small JSON file per partition in a directory. Progress is written at most every ``every``
    seconds; a change of state at once. Failures to write are ignored: the board only
    informs.

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(self, url: str, every: float = 1.0) -> None:
        self.url, self.every = url.rstrip("/"), every
        self._written: dict[int, tuple[str, float]] = {}
        self._fs, self._path = filesystem(self.url, local_as_none=True)

    def report(self, partition: int, state: str, records: int = 0, of: int = 0) -> None:
        """Say that ``partition`` is in ``state`` (``records`` of ``of`` read so far)."""
        now = time.monotonic()
        last = self._written.get(partition)
        if last is not None and last[0] == state and now - last[1] < self.every:
            return
        self._written[partition] = (state, now)
        entry = json.dumps({"state": state, "records": records, "of": of, "at": time.time()})
        path = f"{self._path}/{partition}.json"
        try:
            if self._fs is None:
                Path(self._path).mkdir(parents=True, exist_ok=True)
                Path(f"{path}.tmp").write_text(entry)
                os.replace(f"{path}.tmp", path)
            else:
                self._fs.pipe(path, entry.encode())
        except OSError:
            pass

    def read(self) -> dict[int, dict[str, Any]]:
        """``{partition: {"state", "records", "of", "at"}}`` as the tasks last said."""
        found: dict[int, dict[str, Any]] = {}
        try:
            if self._fs is None:
                names = [n for n in os.listdir(self._path) if n.endswith(".json")]
                texts = {n: Path(self._path, n).read_text() for n in names}
            else:
                names = [p.rsplit("/", 1)[-1] for p in self._fs.ls(self._path, detail=False)]
                texts = {n: self._fs.cat(f"{self._path}/{n}").decode() for n in names
                         if n.endswith(".json")}  # fmt: skip
        except (OSError, FileNotFoundError):
            return found
        for name, text in texts.items():
            try:
                found[int(name.removesuffix(".json"))] = json.loads(text)
            except ValueError:  # being replaced: the next read has it
                continue
        return found
