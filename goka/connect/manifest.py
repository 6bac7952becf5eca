"""The manifest of a Parquet sink's root: which files are committed, each partition's next
offset, each partition's schema, and the files being written.

Layout under the root (files and directories starting with ``_`` are ignored by pyarrow,
pandas, Spark and DuckDB's ``**/*.parquet`` globs alike)::

    _goka/sink.json                          which sink owns the root (name, topic)
    _goka/manifest/<partition>/<next>.json   a commit: files added, the next offset
    _goka/schema/<partition>.arrow           the partition's columns so far (Arrow IPC)
    _goka/staging/<file>.parquet.tmp         written, not committed yet
    <partition_by dirs>/part-<partition>-<first offset>-<last offset>.parquet

A write stages its files, commits a manifest entry (written whole: a single put on an object
store, elsewhere a temporary name renamed; the commit point), then moves each staged file to
its place (on an object store a copy, then a delete). Recovery (before each write) finishes
the moves of committed entries and deletes staged files no entry names once they are older
than :data:`STAGED_GRACE` (a younger one may be another writer's). So a file at its place is
committed, a partial file is never at its place, and a reader of the directory (or of
:func:`committed_files`) sees every committed record once; a committed file found neither in
place nor staged is an error, never a silent loss.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import posixpath
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from goka.errors import SinkError
from goka.storage.urls import ensure_dir, filesystem, move, remove, write_whole

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Manifest", "committed_files", "read_table"]

META_DIR = "_goka"
#: Seconds a staged file that no entry names is left alone by recovery: it may be the file of
#: another writer of the partition (a retried task beside one not dead yet) about to commit.
STAGED_GRACE = 600.0
#: A partition's entries are merged into one when it has more than this many.
MERGE_AFTER = 32


def open_root(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """``(filesystem, root path in it)`` of a local path or an fsspec URL."""
    fs, root = filesystem(path, storage_options)
    return fs, root.rstrip("/") or "/"


class Manifest:
    """The manifest of one root (see the module docstring); ``name``/``topic``: the sink
    writing there (None: only reading)."""

    def __init__(self, path: str, storage_options: Mapping[str, Any] | None = None,
                 name: str | None = None, topic: str | None = None) -> None:  # fmt: skip
        self.path = path
        self.fs, self.root = open_root(path, storage_options)
        self.name, self.topic = name, topic
        self._claimed = False

    def _meta(self, *parts: str) -> str:
        return posixpath.join(self.root, META_DIR, *parts)

    def _write_whole(self, path: str, data: bytes) -> None:
        """Write ``path`` whole or not at all (:func:`~goka.storage.urls.write_whole`)."""
        ensure_dir(self.fs, posixpath.dirname(path))
        write_whole(self.fs, path, data)

    def _list(self, directory: str) -> list[str]:
        self.fs.invalidate_cache(directory)  # (what other processes wrote since: s3fs caches)
        try:
            return sorted(str(p) for p in self.fs.ls(directory, detail=False))
        except FileNotFoundError:
            return []

    # -- ownership -------------------------------------------------------------------------------
    def claim(self) -> None:
        """Make sure the root is this sink's (writing its name there the first time).

        Raises:
            SinkError: another sink (another name or topic) writes there.
        """
        if self._claimed:
            return
        owner = self._meta("sink.json")
        mine = {"sink": self.name, "topic": self.topic}
        if self.fs.exists(owner):
            with self.fs.open(owner, "rb") as found:
                theirs = json.loads(found.read())
            if theirs != mine:
                raise SinkError(f"Parquet sink {self.name!r}: {self.path} belongs to sink "
                                f"{theirs.get('sink')!r} of topic {theirs.get('topic')!r}; "
                                "one sink per root")  # fmt: skip
        else:
            self._write_whole(owner, json.dumps(mine).encode())
        self._claimed = True

    # -- positions -------------------------------------------------------------------------------
    def entries(self, partition: int) -> list[str]:
        """The partition's entry files, oldest first."""
        found = self._list(self._meta("manifest", f"{partition:05d}"))
        return [p for p in found if p.endswith(".json")]

    def next_offset(self, partition: int) -> int:
        """The partition's next offset to write (-1: nothing committed yet)."""
        entries = self.entries(partition)
        return int(posixpath.basename(entries[-1])[:-5]) if entries else -1

    def offsets(self) -> dict[int, int]:
        """Each partition's next offset (partitions with commits only)."""
        found = {}
        for directory in self._list(self._meta("manifest")):
            name = posixpath.basename(directory)
            if name.isdigit():
                position = self.next_offset(int(name))
                if position >= 0:
                    found[int(name)] = position
        return found

    def schema(self, partition: int) -> pa.Schema | None:
        """The partition's columns so far (None: none stored)."""
        import pyarrow as pa

        where = self._meta("schema", f"{partition:05d}.arrow")
        try:
            with self.fs.open(where, "rb") as found:
                return pa.ipc.read_schema(pa.py_buffer(found.read()))
        except FileNotFoundError:
            return None

    def set_schema(self, partition: int, schema: pa.Schema) -> None:
        """Store the partition's columns (before the commit that first has them)."""
        data = schema.serialize().to_pybytes()
        self._write_whole(self._meta("schema", f"{partition:05d}.arrow"), data)

    # -- writing ---------------------------------------------------------------------------------
    def staged(self, name: str) -> str:
        """Where file ``name`` (its place's base name) is staged."""
        return self._meta("staging", name + ".tmp")

    def place(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def commit(self, partition: int, end: int, files: list[dict[str, Any]]) -> None:
        """Commit ``files`` (staged, each ``{"path": relative place, ...}``) and ``end`` as the
        partition's next offset; then move them to their places."""
        entry = {"partition": partition, "next": end, "files": files,
                 "committed_at": dt.datetime.now(dt.UTC).isoformat()}  # fmt: skip
        where = self._meta("manifest", f"{partition:05d}", f"{end:020d}.json")
        self._write_whole(where, json.dumps(entry).encode())
        self._place(files)
        entries = self.entries(partition)
        if len(entries) > MERGE_AFTER:
            self._merge(partition, entries)

    def _place(self, files: Iterable[dict[str, Any]]) -> None:
        for item in files:
            staged, place = self.staged(posixpath.basename(item["path"])), self.place(item["path"])
            for folder in (posixpath.dirname(staged), posixpath.dirname(place)):
                self.fs.invalidate_cache(folder)  # (another writer may have moved it since)
            if self.fs.exists(staged):
                ensure_dir(self.fs, posixpath.dirname(place))
                with contextlib.suppress(FileNotFoundError):  # (another writer moved it first)
                    move(self.fs, staged, place)
                self.fs.invalidate_cache(posixpath.dirname(place))
            if not self.fs.exists(place):  # (never silently: its records would be lost)
                raise SinkError(f"Parquet sink {self.name!r}: committed file {place} is neither "
                                f"in place nor staged ({staged}): another writer of the "
                                "partition deleted it")  # fmt: skip

    def _merge(self, partition: int, entries: list[str]) -> None:
        """Fold the partition's entries into its newest (rewritten whole), then delete the
        others (a crash in between leaves entries the newest repeats: readers dedupe)."""
        files: dict[str, dict[str, Any]] = {}
        for entry in entries:
            for item in self._read(entry)["files"]:
                files[item["path"]] = item
        newest = self._read(entries[-1])
        newest["files"] = list(files.values())
        self._write_whole(entries[-1], json.dumps(newest).encode())
        for entry in entries[:-1]:
            remove(self.fs, entry)

    def _read(self, entry: str) -> dict[str, Any]:
        with self.fs.open(entry, "rb") as found:
            data: dict[str, Any] = json.loads(found.read())
            return data

    def recover(self, partition: int) -> None:
        """Finish what a crash interrupted for ``partition``: committed files still staged go
        to their places; staged files of no entry and half-written entries are deleted."""
        for left in self._list(self._meta("manifest", f"{partition:05d}")):
            if left.endswith(".tmp"):  # an entry a crash left half written
                remove(self.fs, left)
        committed: dict[str, dict[str, Any]] = {}
        for entry in self.entries(partition):
            for item in self._read(entry)["files"]:
                committed[posixpath.basename(item["path"])] = item
        prefix = f"part-{partition:05d}-"
        for staged in self._list(self._meta("staging")):
            name = posixpath.basename(staged)
            if not name.startswith(prefix):
                continue
            if name.endswith(".parquet.tmp") and name[:-4] in committed:
                self._place([committed[name[:-4]]])
            elif self._abandoned(staged):  # (a young one may be another writer's, in use)
                remove(self.fs, staged)

    def _abandoned(self, staged: str) -> bool:
        """Whether a staged file no entry names is older than :data:`STAGED_GRACE` (unknown
        age: left alone)."""
        try:
            modified = self.fs.modified(staged)
        except (NotImplementedError, OSError):
            return False
        return bool(time.time() - modified.timestamp() > STAGED_GRACE)

    def files(self) -> list[str]:
        """Every committed file's place (relative to the root), sorted."""
        found: set[str] = set()
        for directory in self._list(self._meta("manifest")):
            if posixpath.basename(directory).isdigit():
                for entry in self._list(directory):
                    if entry.endswith(".json"):
                        found.update(item["path"] for item in self._read(entry)["files"])
        return sorted(found)

    def reset(self) -> None:
        """Forget every commit (the files stay: delete them to rewrite)."""
        for what in ("manifest", "schema", "staging", "sink.json"):
            if self.fs.exists(self._meta(what)):
                remove(self.fs, self._meta(what), recursive=True)
        self._claimed = False


def committed_files(path: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The committed Parquet files under ``path`` (full paths in its filesystem)."""
    manifest = Manifest(path, storage_options)
    return [manifest.place(p) for p in manifest.files()]


def read_table(path: str, storage_options: Mapping[str, Any] | None = None,
               columns: list[str] | None = None) -> pa.Table:  # fmt: skip
    """Every committed record under ``path`` as one table (the columns of every partition's
    schema; files without a column give nulls).

    Raises:
        SinkError: partitions store a column with types that do not unify.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    manifest = Manifest(path, storage_options)
    files = [manifest.place(p) for p in manifest.files()]  # (then the schemas: each file's
    # columns were stored before its commit, so they are all there, whatever commits meanwhile)
    schemas = [s for s in (manifest.schema(p) for p in manifest.offsets()) if s is not None]
    try:
        schema = pa.unify_schemas(schemas) if schemas else None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SinkError(f"{path}: partitions store a column with different types: {exc}") from None
    if not files:
        return (schema or pa.schema([])).empty_table()
    dataset = ds.dataset(files, schema=schema, filesystem=manifest.fs, format="parquet")
    return dataset.to_table(columns=columns)
