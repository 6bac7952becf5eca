"""Snapshots of partition stores in a shared location, addressed by an fsspec URL.

A snapshot lets a partition's state follow the partition to another machine without re-reading
the whole table topic: restore the newest snapshot, then replay the topic from the offset the
snapshot names. The table topic stays the truth; a snapshot is an accelerator that may be
missing or damaged without harm (restores verify every file and fall back).

Layout under ``<url>/<group>/<partition>/``::

    manifests/<id>.json   one per snapshot: its stores, their offsets and their files
    files/<object>        file contents. A file that never changes under its name (a LevelDB
                          table file) is uploaded once and shared by every snapshot that has it;
                          other files get one object per snapshot.

A manifest is written after every file it names, so a manifest names a complete snapshot. After
publishing, the newest ``keep`` manifests are kept and files no kept manifest names are deleted
once older than ``grace`` seconds (a younger one may belong to a snapshot still being uploaded).

Each store directory holds ``GOKA-SNAPSHOT`` (see :class:`StoreState`): which uploaded objects
its files already are, so snapshots stay incremental across processes sharing the directory.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goka.errors import ConfigurationError, SnapshotError
from goka.storage.base import Storage
from goka.storage.urls import filesystem

__all__ = [
    "Manifest",
    "SnapshotFile",
    "SnapshotStore",
    "Staged",
    "StoreSnapshot",
    "StoreState",
    "UploadReport",
    "install",
    "remove_abandoned",
    "stage",
]

log = logging.getLogger(__name__)

FORMAT = "goka-snapshot-1"
STATE_FILE = "GOKA-SNAPSHOT"
Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a stored snapshot: its object (relative to the partition's directory), size
    and CRC-32."""

    object: str
    size: int
    crc32: int


@dataclass(frozen=True)
class StoreSnapshot:
    """One store of a snapshot: its table, the offsets its content reflects, and its files."""

    table: str
    offsets: Offsets
    files: dict[str, SnapshotFile]


@dataclass(frozen=True)
class Manifest:
    """A complete snapshot of a partition's stores (named by ``id``, newest id last in order)."""

    id: str
    group: str
    partition: int
    created: float
    stores: dict[str, StoreSnapshot]

    def to_json(self) -> bytes:
        """Serialise (the form written to ``manifests/<id>.json``)."""
        stores = {
            name: {
                "table": s.table,
                "offsets": [[t, p, o] for (t, p), o in sorted(s.offsets.items())],
                "files": {n: [f.object, f.size, f.crc32] for n, f in sorted(s.files.items())},
            }
            for name, s in self.stores.items()
        }
        return json.dumps(
            {"format": FORMAT, "id": self.id, "group": self.group, "partition": self.partition,
             "created": self.created, "stores": stores}, indent=1,
        ).encode()  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse a manifest.

        Raises:
            ValueError: not a manifest of this format.
        """
        raw = json.loads(data)
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT!r}")
        try:
            stores = {name: _store(s) for name, s in raw["stores"].items()}
            partition, created = int(raw["partition"]), float(raw["created"])
            return cls(raw["id"], raw["group"], partition, created, stores)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed manifest: {exc!r}") from exc

    def objects(self) -> Iterator[SnapshotFile]:
        """Every file of every store."""
        for store in self.stores.values():
            yield from store.files.values()


def _store(raw: dict[str, Any]) -> StoreSnapshot:
    files = {n: SnapshotFile(o, int(size), int(crc)) for n, (o, size, crc) in raw["files"].items()}
    return StoreSnapshot(raw["table"], {(t, int(p)): int(o) for t, p, o in raw["offsets"]}, files)


@dataclass
class StoreState:
    """What a store directory knows about its snapshots (the ``GOKA-SNAPSHOT`` file).

    Attributes:
        lineage: names this directory's file history: an immutable file ``N`` of it is uploaded
            as object ``files/<lineage>-N``. A new directory (or one copied or moved, which
            changes its inode) gets a new lineage, so two histories never share object names.
        inherited: files restored from a snapshot: name -> (object, size).
        staged_at: when the last snapshot of it was staged (wall clock).
    """

    lineage: str
    inherited: dict[str, tuple[str, int]] = field(default_factory=dict)
    staged_at: float = 0.0

    @classmethod
    def read(cls, directory: Path) -> StoreState:
        """The state of ``directory``; a new lineage when it has none or was copied or moved."""
        try:
            raw = json.loads((directory / STATE_FILE).read_bytes())
            if raw["inode"] == _inode(directory):
                inherited = {n: (o, int(s)) for n, (o, s) in raw["inherited"].items()}
                return cls(raw["lineage"], inherited, float(raw["staged_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # missing or unreadable: start a new lineage
        return cls(secrets.token_hex(8))

    def write(self, directory: Path) -> None:
        """Save into ``directory`` (created if missing), atomically."""
        directory.mkdir(parents=True, exist_ok=True)
        data = {"lineage": self.lineage, "inode": _inode(directory), "staged_at": self.staged_at,
                "inherited": {n: list(v) for n, v in self.inherited.items()}}  # fmt: skip
        temporary = directory / f"{STATE_FILE}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(data))
        os.replace(temporary, directory / STATE_FILE)


def _inode(directory: Path) -> list[int]:
    info = directory.stat()
    return [info.st_dev, info.st_ino]


@dataclass(frozen=True)
class StagedStore:
    """A store's checkpoint in the staging directory, waiting to be uploaded.

    ``files`` maps each file name to the object an immutable file is stored as (None: a file
    that may change under its name, stored once per snapshot)."""

    table: str
    offsets: Offsets
    files: dict[str, str | None]


@dataclass(frozen=True)
class Staged:
    """A consistent local copy of a partition's stores, made by :func:`stage`."""

    id: str
    group: str
    partition: int
    created: float
    directory: Path
    stores: dict[str, StagedStore]

    def discard(self) -> None:
        """Delete the staging copy."""
        shutil.rmtree(self.directory, ignore_errors=True)


def stage(
    group: str, partition: int, stores: Mapping[str, tuple[Storage, Path]], root: Path
) -> Staged:
    """Checkpoint each ``{name: (storage, its directory)}`` under ``root`` for upload.

    Runs while the caller has the stores to itself (no write in between): a LevelDB checkpoint
    is a hard-link copy taken with the database closed for a moment.

    Raises:
        StorageError: a checkpoint failed (the staging copy is removed).
    """
    created = time.time()
    snapshot_id = f"{int(created * 1000):015d}-{secrets.token_hex(4)}"
    directory = root / f"{partition}-{os.getpid()}-{snapshot_id}"
    staged: dict[str, StagedStore] = {}
    try:
        for name, (storage, path) in stores.items():
            state = StoreState.read(path) if path.is_dir() else StoreState(secrets.token_hex(8))
            files = storage.checkpoint(directory / name)
            objects: dict[str, str | None] = {}
            for file in files:
                size = (directory / name / file.name).stat().st_size
                inherited = state.inherited.get(file.name)
                if not file.immutable:
                    objects[file.name] = None
                elif inherited is not None and inherited[1] == size:
                    objects[file.name] = inherited[0]
                else:
                    objects[file.name] = f"files/{state.lineage}-{file.name}"
            staged[name] = StagedStore(storage.info.table, storage.offsets(), objects)
            state.staged_at = created
            state.write(path)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Staged(snapshot_id, group, partition, created, directory, staged)


def install(manifest: Manifest, store: str, directory: Path) -> None:
    """Record in a directory fetched from ``manifest`` which objects its files are."""
    files = manifest.stores[store].files
    state = StoreState(secrets.token_hex(8), {n: (f.object, f.size) for n, f in files.items()})
    state.staged_at = manifest.created
    state.write(directory)


def remove_abandoned(root: Path) -> None:
    """Delete staging or restore directories under ``root`` left by processes that died."""
    if not root.is_dir():
        return
    for entry in root.iterdir():
        parts = entry.name.split("-")
        if len(parts) > 1 and parts[1].isdigit() and not _alive(int(parts[1])):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class UploadReport:
    """What publishing one snapshot did (``error`` set if it failed)."""

    group: str
    partition: int
    snapshot: str
    bytes: int = 0
    files: int = 0
    reused: int = 0
    seconds: float = 0.0
    error: str | None = None


class SnapshotStore:
    """Publishes, lists and fetches snapshots under one URL (see the module docstring).

    Args:
        url: where snapshots live: a path or ``file://``, ``s3://`` (``s3a://`` is read as
            ``s3://``), ``gs://``, ``hdfs://``, ``memory://``, any fsspec protocol whose
            package is installed.
        keep: how many snapshots of each partition to keep.
        storage_options: passed to fsspec (credentials, endpoints).
        grace: seconds an unreferenced file is left alone (it may belong to a snapshot being
            uploaded by another process).

    Thread safety: one store may be used by several threads; publishing the same partition
    from two processes at once is safe (manifests are written last, objects atomically).

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(
        self,
        url: str,
        *,
        keep: int = 3,
        storage_options: Mapping[str, Any] | None = None,
        grace: float = 600.0,
    ) -> None:
        if keep < 1:
            raise ConfigurationError(f"snapshots to keep must be at least 1, got {keep}")
        self.url = url
        self.keep = keep
        self.grace = grace
        try:
            self.fs, root = filesystem(url, storage_options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"snapshot location {url!r} is not usable: {exc}") from exc
        self.root = root.rstrip("/")

    def __reduce__(self) -> tuple[Any, ...]:  # the file system client is rebuilt, not pickled
        return (_rebuild, (type(self), self.url, self.keep, self.grace, self.fs.storage_options))

    def location(self, group: str, partition: int) -> str:
        """The directory of one partition's snapshots."""
        return f"{self.root}/{group}/{partition}"

    def manifests(self, group: str, partition: int) -> list[Manifest]:
        """Return the readable manifests of a partition, newest first (unreadable ones are
        skipped with a warning naming them)."""
        found = []
        paths = self._list(f"{self.location(group, partition)}/manifests")
        for path in sorted(paths, reverse=True):
            if not path.endswith(".json"):
                continue
            try:
                found.append(Manifest.from_json(self.fs.cat_file(path)))
            except (OSError, ValueError) as exc:
                log.warning("snapshot manifest %s is unreadable (%s): not used", path, exc)
        return found

    def publish(self, staged: Staged) -> UploadReport:
        """Upload what the partition's kept snapshots lack, write the manifest, prune.

        Raises:
            OSError: the location failed (nothing is published; files may stay for pruning).
        """
        started = time.monotonic()
        base = self.location(staged.group, staged.partition)
        for sub in ("files", "manifests"):
            self.fs.makedirs(f"{base}/{sub}", exist_ok=True)
        present = {f.object: f for m in self.manifests(staged.group, staged.partition)
                   for f in m.objects()}  # fmt: skip
        stores, sent, files, reused = {}, 0, 0, 0
        for name, store in staged.stores.items():
            kept: dict[str, SnapshotFile] = {}
            for file, known in store.files.items():
                local = staged.directory / name / file
                size = local.stat().st_size
                old = present.get(known) if known is not None else None
                if old is not None and old.size == size:
                    kept[file], reused = old, reused + 1
                    continue
                target = known or f"files/{staged.id}-{name}-{file}"
                kept[file] = SnapshotFile(target, size, self._upload(local, f"{base}/{target}"))
                sent, files = sent + size, files + 1
            stores[name] = StoreSnapshot(store.table, store.offsets, kept)
        manifest = Manifest(staged.id, staged.group, staged.partition, staged.created, stores)
        self._put(f"{base}/manifests/{staged.id}.json", manifest.to_json())
        self._prune(staged.group, staged.partition)
        return UploadReport(staged.group, staged.partition, staged.id, sent, files, reused,
                            time.monotonic() - started)  # fmt: skip

    def fetch(self, manifest: Manifest, store: str, directory: Path) -> int:
        """Download one store of a snapshot into ``directory`` (created) and verify it.

        Returns:
            The bytes fetched.

        Raises:
            SnapshotError: a file is missing, truncated or corrupt (the message names it).
        """
        directory.mkdir(parents=True)
        base = self.location(manifest.group, manifest.partition)
        where = f"snapshot {manifest.id} of group {manifest.group!r} partition {manifest.partition}"
        total = 0
        for name, file in manifest.stores[store].files.items():
            remote, local = f"{base}/{file.object}", directory / name
            try:
                self._download(remote, local)
            except FileNotFoundError as exc:
                raise SnapshotError(f"{where}: file {remote} is missing") from exc
            except OSError as exc:
                raise SnapshotError(f"{where}: cannot fetch {remote}: {exc}") from exc
            size = local.stat().st_size
            if size != file.size:
                raise SnapshotError(f"{where}: {remote} has {size} bytes, expected {file.size}")
            if _crc32(local) != file.crc32:
                raise SnapshotError(f"{where}: {remote} is corrupt (CRC-32 mismatch)")
            total += size
        return total

    # -- internals -------------------------------------------------------------------------------
    def _list(self, path: str) -> list[str]:
        try:
            return [str(p) for p in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    def _download(self, remote: str, local: Path) -> None:
        self.fs.get_file(remote, str(local))

    def _upload(self, local: Path, remote: str) -> int:
        """Copy ``local`` to ``remote`` atomically (a temporary name, then a rename)."""
        crc = _crc32(local)
        temporary = f"{remote}.{secrets.token_hex(4)}.tmp"
        self.fs.put_file(str(local), temporary)
        self.fs.mv(temporary, remote)
        return crc

    def _put(self, remote: str, data: bytes) -> None:
        temporary = f"{remote}.{secrets.token_hex(4)}.tmp"
        self.fs.pipe_file(temporary, data)
        self.fs.mv(temporary, remote)

    def _prune(self, group: str, partition: int) -> None:
        base = self.location(group, partition)
        manifests = self.manifests(group, partition)  # read again: others may have published
        for old in manifests[self.keep :]:
            self.fs.rm(f"{base}/manifests/{old.id}.json")
        named = {f"{base}/{f.object}" for m in manifests[: self.keep] for f in m.objects()}
        unused = [p for p in self._list(f"{base}/files") if p not in named]
        unused += [p for p in self._list(f"{base}/manifests") if p.endswith(".tmp")]
        for path in unused:
            if self._old(path):
                self.fs.rm(path)

    def _old(self, path: str) -> bool:
        try:
            modified = self.fs.modified(path)
        except (NotImplementedError, OSError):
            return False  # unknown age: never delete what may be in use
        return bool(time.time() - modified.timestamp() > self.grace)


def _rebuild(
    cls: type[SnapshotStore], url: str, keep: int, grace: float, options: dict[str, Any]
) -> SnapshotStore:
    return cls(url, keep=keep, grace=grace, storage_options=options)


def _crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc
