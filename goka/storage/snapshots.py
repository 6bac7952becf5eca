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

import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goka.errors import ConfigurationError, SnapshotError
from goka.storage.manifests import (
    Manifest,
    SnapshotFile,
    Staged,
    StoreSnapshot,
    StoreState,
    install,
    remove_abandoned,
    stage,
)
from goka.storage.urls import filesystem, is_object_store, remove, write_whole

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
        #: parsed manifests by path, per manifests folder: each is written once, never changed
        self._parsed: dict[str, dict[str, Manifest]] = {}

    def __reduce__(self) -> tuple[Any, ...]:  # the file system client is rebuilt, not pickled
        return (_rebuild, (type(self), self.url, self.keep, self.grace, self.fs.storage_options))

    def location(self, group: str, partition: int) -> str:
        """The directory of one partition's snapshots."""
        return f"{self.root}/{group}/{partition}"

    def manifests(self, group: str, partition: int) -> list[Manifest]:
        """Return the readable manifests of a partition, newest first (unreadable ones are
        skipped with a warning naming them)."""
        found = []
        where = f"{self.location(group, partition)}/manifests"
        paths = [p for p in self._list(where) if p.endswith(".json")]
        known = self._parsed.setdefault(where, {})
        for gone in set(known) - set(paths):  # (pruned by someone: forgotten here too)
            known.pop(gone, None)
        for path in sorted(paths, reverse=True):
            manifest = known.get(path)
            if manifest is None:  # (a manifest is written once: read it once)
                try:
                    manifest = known[path] = Manifest.from_json(self.fs.cat_file(path))
                except (OSError, ValueError) as exc:
                    log.warning("snapshot manifest %s is unreadable (%s): not used", path, exc)
                    continue
            found.append(manifest)
        return found

    def publish(self, staged: Staged) -> UploadReport:
        """Upload what the partition's kept snapshots lack, write the manifest, prune.

        Raises:
            OSError: the location failed (nothing is published; files may stay for pruning).
        """
        started = time.monotonic()
        base = self.location(staged.group, staged.partition)
        if not is_object_store(self.fs):  # (an object store has no folders to make)
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
        self._parsed.setdefault(f"{base}/manifests", {})[f"{base}/manifests/{staged.id}.json"] = (
            manifest  # (the prune's listing finds it: not read back)
        )
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

    def warm(self, group: str) -> None:
        """Make the client ready with one listing of ``group``'s folder (an S3 client loads
        its service model and connects on its first request: ~0.5 s of CPU that would
        otherwise stall the loop of the task that publishes first). Only time is at stake:
        errors are left to the tasks."""
        try:
            self._list(f"{self.root}/{group}")
        except Exception as exc:  # (the tasks report what is wrong with the location)
            log.debug("snapshot location %s: warming its client failed: %s", self.url, exc)

    # -- internals -------------------------------------------------------------------------------
    def _list(self, path: str) -> list[str]:
        self.fs.invalidate_cache(path)  # (what other processes published since: s3fs caches)
        try:
            return [str(p) for p in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    def _download(self, remote: str, local: Path) -> None:
        self.fs.get_file(remote, str(local))

    def _upload(self, local: Path, remote: str) -> int:
        """Copy ``local`` to ``remote`` whole or not at all (:func:`write_whole`)."""
        crc = _crc32(local)
        write_whole(self.fs, remote, local=str(local))
        return crc

    def _put(self, remote: str, data: bytes) -> None:
        write_whole(self.fs, remote, data)

    def _prune(self, group: str, partition: int) -> None:
        base = self.location(group, partition)
        manifests = self.manifests(group, partition)  # read again: others may have published
        for old in manifests[self.keep :]:
            remove(self.fs, f"{base}/manifests/{old.id}.json")
        named = {f"{base}/{f.object}" for m in manifests[: self.keep] for f in m.objects()}
        unused = [p for p in self._list(f"{base}/files") if p not in named]
        if not is_object_store(self.fs):  # (a manifest written by a rename left behind)
            unused += [p for p in self._list(f"{base}/manifests") if p.endswith(".tmp")]
        for path in unused:
            if self._old(path):
                remove(self.fs, path)

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
