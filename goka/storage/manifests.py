"""What a snapshot of partition stores is (:class:`Manifest`), and the local side of taking
one: staging a hard-link copy of the stores (:func:`stage`), recording in a fetched copy which
uploaded objects its files are (:func:`install`), and each store directory's
``GOKA-SNAPSHOT`` (:class:`StoreState`). Publishing and fetching: :mod:`goka.storage.snapshots`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goka.storage.base import Storage

__all__ = [
    "FORMAT",
    "Manifest",
    "Offsets",
    "SnapshotFile",
    "Staged",
    "StagedStore",
    "StoreSnapshot",
    "StoreState",
    "install",
    "process_alive",
    "remove_abandoned",
    "stage",
]

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
        if len(parts) > 1 and parts[1].isdigit() and not process_alive(int(parts[1])):
            shutil.rmtree(entry, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Is process ``pid`` of this machine alive (a leftover of a dead one may go)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
