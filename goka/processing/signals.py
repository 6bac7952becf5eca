"""What the driver and the tasks of a processor tell each other through files beside the
checkpoint (a path or an fsspec URL, shared by every executor as the checkpoint is): a request
to stop (:class:`StopSignal`) and what partitions are doing while they recover
(:class:`PartitionBoard`)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from goka.storage.urls import filesystem, remove

__all__ = ["PartitionBoard", "StopSignal"]


class StopSignal:
    """A run's request to stop: a file at a path or fsspec URL that the driver creates and the
    tasks of an epoch look for, at most every ``every`` seconds.

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(self, url: str, every: float = 0.2,
                 storage_options: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.url, self.every = url, every
        self._next = 0.0
        self._set = False
        self._fs, self._path = filesystem(url, storage_options, local_as_none=True)

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
        self._fs.invalidate_cache(self._path)  # (the driver's, another process: s3fs caches)
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
                remove(self._fs, self._path)


class PartitionBoard:
    """Where tasks say what their partitions are doing (``restoring`` or ``rebuilding`` a store,
    how many of how many records, then ``running``) and the driver's monitor reads it: one
    small JSON file per partition in a directory, and one per partition's epoch (and bridge)
    with what it committed so far. Progress is written at most every ``every`` seconds (a
    change of state at once), on a thread of its own: a loop's commit, or an epoch's start,
    does not wait for the disk (a small file's write took 80-90 ms while the broker and
    LevelDB wrote, in ``bench.latency``; an epoch's "running" held its first records up to 15
    ms). The last said of each partition is written. Failures to write are ignored: the board
    only informs.

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(self, url: str, every: float = 1.0,
                 storage_options: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.url, self.every = url.rstrip("/"), every
        self._written: dict[str, tuple[str, float]] = {}
        self._fs, self._path = filesystem(self.url, storage_options, local_as_none=True)
        self._lock = threading.Condition()
        self._pending: dict[str, dict[str, Any]] = {}  # progress to write, the last per name
        self._writing = False
        self._writer: threading.Thread | None = None

    def report(self, partition: int, state: str, records: int = 0, of: int = 0) -> None:
        """Say that ``partition`` is in ``state`` (``records`` of ``of`` read so far)."""
        if self._due(str(partition), state):
            self._say(str(partition), {"state": state, "records": records, "of": of,
                                       "at": time.time()})  # fmt: skip

    def _write(self, name: str, entry: dict[str, Any]) -> None:
        text, path = json.dumps(entry), f"{self._path}/{name}.json"
        try:
            if self._fs is None:
                Path(self._path).mkdir(parents=True, exist_ok=True)
                Path(f"{path}.tmp").write_text(text)
                os.replace(f"{path}.tmp", path)
            else:
                self._fs.pipe(path, text.encode())
        except OSError:
            pass

    def progress(self, partition: int, processed: int, *, bridge: bool = False) -> None:
        """Say that ``partition``'s epoch (or ``bridge`` between epochs) has committed
        ``processed`` records so far (written at most every ``every`` seconds)."""
        name = f"{partition}.{'bridge' if bridge else 'epoch'}"
        if self._due(name, "running"):  # (stamped now: the monitor compares it with epochs' ends)
            self._say(name, {"processed": processed, "at": time.time()})

    def _say(self, name: str, entry: dict[str, Any]) -> None:
        """Have ``entry`` written as ``name`` by the writer thread (replacing one not written
        yet)."""
        with self._lock:
            self._pending[name] = entry
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_pending, name="goka-board",
                                                daemon=True)  # fmt: skip
                self._writer.start()
            self._lock.notify_all()

    def _write_pending(self) -> None:
        while True:
            with self._lock:
                self._writing = False
                self._lock.notify_all()
                while not self._pending:
                    self._lock.wait()
                pending, self._pending, self._writing = self._pending, {}, True
            for name, entry in pending.items():
                self._write(name, entry)

    def settle(self, timeout: float = 5.0) -> bool:
        """Wait until the progress said so far is written; False if ``timeout`` passed."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending and not self._writing, timeout)

    def _due(self, name: str, state: str) -> bool:
        """Is ``name`` to be written now: a new state, or ``every`` seconds since?"""
        now, last = time.monotonic(), self._written.get(name)
        if last is not None and last[0] == state and now - last[1] < self.every:
            return False
        self._written[name] = (state, now)
        return True

    def read(self) -> dict[int, dict[str, Any]]:
        """``{partition: {"state", "records", "of", "at"}}`` as the tasks last said."""
        return self.sample()[0]

    def sample(self, since: float | None = None) -> tuple[dict[int, dict[str, Any]], int]:
        """What :meth:`read` says, and the records the epochs (and bridges) running now have
        committed: what their partitions said after ``since`` (unix s: when the last finished
        epoch was counted; None: 0). One listing of the board."""
        entries = self._entries()
        states = {int(name): entry for name, entry in entries.items() if name.isdigit()}
        committed = 0 if since is None else sum(
            entry.get("processed", 0) for name, entry in entries.items()
            if not name.isdigit() and entry.get("at", 0) > since
        )  # fmt: skip
        return states, committed

    def _entries(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        try:
            if self._fs is None:
                names = [n for n in os.listdir(self._path) if n.endswith(".json")]
                texts = {n: Path(self._path, n).read_text() for n in names}
            else:
                self._fs.invalidate_cache(self._path)  # (the tasks write it: s3fs caches)
                names = [p.rsplit("/", 1)[-1] for p in self._fs.ls(self._path, detail=False)]
                texts = {n: self._fs.cat(f"{self._path}/{n}").decode() for n in names
                         if n.endswith(".json")}  # fmt: skip
        except (OSError, FileNotFoundError):
            return found
        for name, text in texts.items():
            try:
                found[name.removesuffix(".json")] = json.loads(text)
            except ValueError:  # being replaced: the next read has it
                continue
        return found
