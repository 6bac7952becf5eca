"""Where a group's state lives, whatever the number of groups a command runs: its stores in
``<state_dir>/<group>/`` (``partition-N``, ``join-<table>-N``), its Spark checkpoint in
``<state_dir>/<group>/checkpoint`` unless one is given (``goka processor run
--checkpoint-dir C``: ``C/<group>``).

Until 2026-11, ``goka processor run`` nested both once more when it ran several groups
(``<state_dir>/<group>/<group>/partition-N``), and took ``--checkpoint-dir`` as the
checkpoint itself when it ran one. :func:`move_nested` and :func:`move_flat_checkpoint` move
what they find in those places to the one layout, once, and say so (a task that found no
store would rebuild it from the changelog, and a query without its checkpoint would start
from ``starting_offsets``). They move only what the old layouts put there, by name, and only
where they can tell it is one: anything else is left alone (and said)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

from goka.errors import ConfigurationError

__all__ = ["CHECKPOINT_ENTRIES", "move_flat_checkpoint", "move_nested"]

log = logging.getLogger(__name__)

#: What a processor's checkpoint holds at its top: Spark's logs and metadata, goka's
#: snapshots (``state/<group>``) and its stop and board files. Nothing else moves.
CHECKPOINT_ENTRIES = ("metadata", ".metadata.crc", "offsets", "commits", "sources", "state",
                      "goka-stop", "goka-partitions")  # fmt: skip
#: What a group's state directory holds: stores (with their writer, holder and release
#: files), epoch claims, the default checkpoint. Nothing else moves.
_STATE_ENTRY = re.compile(r"(?:partition|join-.+)-\d+(?:\.[\w-]+)?|epoch-claims|checkpoint")
_STORE = re.compile(r"(?:partition|join-.+)-\d+")

_lock = threading.Lock()
_checked: set[Path] = set()


def move_nested(state_dir: str | Path, group: str) -> list[str]:
    """Move the stores (and checkpoint, claims) of the nested layout,
    ``<state_dir>/<group>/<group>/``, up into ``<state_dir>/<group>/``, entry by entry, where
    nothing of that name is yet; remove the nested directory once empty. Only a directory that
    holds a LevelDB store (``partition-N/CURRENT``) is taken for the nested layout. Checked
    once per process and group directory; processes that move at once each move what is left
    (a rename is atomic). Returns the entries moved."""
    root = Path(state_dir) / group
    nested = root / group
    with _lock:
        if root in _checked:
            return []
        try:
            if not nested.is_dir() or not any(
                _STORE.fullmatch(p.name) and (p / "CURRENT").is_file() for p in nested.iterdir()
            ):
                _checked.add(root)
                return []
            entries = sorted(nested.iterdir())
        except FileNotFoundError:  # (another process moved it all meanwhile)
            return []
        moved = []
        for entry in entries:
            target = root / entry.name
            if not _STATE_ENTRY.fullmatch(entry.name) or target.exists():
                continue
            with contextlib.suppress(FileNotFoundError):  # (another process moved it)
                os.rename(entry, target)
                moved.append(entry.name)
        with contextlib.suppress(OSError):
            nested.rmdir()
        _checked.add(root)
    left: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        left = sorted(p.name for p in nested.iterdir()) if nested.is_dir() else []
    said = (f"; left in {nested}: {', '.join(left)} (names {root} has too, or not a store's): "
            f"remove them once {root} is right") if left else ""  # fmt: skip
    log.warning("group %s: moved %s from %s to %s (one state layout whatever the number of "
                "groups: <state-dir>/<group>/)%s", group, ", ".join(moved) or "nothing", nested,
                root, said)  # fmt: skip
    return moved


def move_flat_checkpoint(checkpoint_dir: str, groups: Mapping[str, Sequence[str]]) -> str | None:
    """Move a Spark checkpoint that ``checkpoint_dir`` holds itself (the layout of one group,
    before ``--checkpoint-dir`` became the parent of each group's) into
    ``<checkpoint_dir>/<group>``. ``groups``: each group of this run with the topics it reads.
    The checkpoint's group is the one whose topics its newest offsets name; a checkpoint of a
    group not in this run is left for that group's next start. Only
    :data:`CHECKPOINT_ENTRIES` move. Returns the group whose checkpoint moved, or None.

    Raises:
        ConfigurationError: a checkpoint of this run cannot be moved: on a URL (``hdfs://``,
            ``s3a://``), or its group cannot be told.
    """
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        _refuse_remote(checkpoint_dir)
        return None
    root = Path(urlparse(checkpoint_dir).path if checkpoint_dir.startswith("file:")
                else checkpoint_dir)  # fmt: skip
    pending = [g for g in groups if (root / f".{g}.moving").is_dir()]  # (a move cut short)
    if not pending and not (root / "metadata").is_file():
        return None
    owners = pending or _owners(root, groups)
    if owners is None:  # (another group's: its own start moves it)
        log.warning("%s holds the Spark checkpoint of a group that is not in this run (its "
                    "offsets name none of its groups' topics): left where it is", root)  # fmt: skip
        return None
    if len(owners) != 1 or (root / owners[0]).exists():
        raise ConfigurationError(
            f"--checkpoint-dir {checkpoint_dir} holds a Spark checkpoint itself (the layout "
            f"before --checkpoint-dir became the parent of each group's), of "
            f"{' or '.join(owners) or 'no group of this run'}: move its entries "
            f"({', '.join(CHECKPOINT_ENTRIES)}) into {checkpoint_dir}/<group>, the group that "
            f"wrote it"
        )
    group = owners[0]
    moving = root / f".{group}.moving"
    moving.mkdir(exist_ok=True)
    for name in CHECKPOINT_ENTRIES:
        with contextlib.suppress(FileNotFoundError):
            os.rename(root / name, moving / name)
    os.rename(moving, root / group)
    log.warning("group %s: moved its Spark checkpoint from %s to %s (--checkpoint-dir is "
                "the parent of each group's checkpoint)", group, root, root / group)  # fmt: skip
    return group


def _owners(root: Path, groups: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The groups of this run whose snapshots the checkpoint holds (``state/<group>``), else
    those that read exactly the topics its newest offsets name (a continuous query's
    ``~epoch`` aside). None: another group's; [] if it cannot be told."""
    snapshots = [g for g in groups if (root / "state" / g).is_dir()]
    if snapshots:
        return snapshots
    logs = [p for p in (root / "offsets").glob("[0-9]*") if p.name.isdigit()]
    if not logs:
        return []
    topics: set[str] = set()
    try:
        for line in max(logs, key=lambda p: int(p.name)).read_text().splitlines()[2:]:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                topics.update(t for t in json.loads(line) if not t.startswith("~"))
    except (OSError, UnicodeDecodeError):
        return []
    if not topics:
        return []
    if any(p.is_dir() for p in (root / "state").glob("*")):
        return None  # (the snapshots of a group not in this run)
    owners = [g for g, read in groups.items() if topics == set(read)]
    return owners or None


def _refuse_remote(checkpoint_dir: str) -> None:
    """Refuse a checkpoint on shared storage that holds a checkpoint itself (it is not moved
    there: a query would start a new one inside it)."""
    from goka.storage.urls import filesystem

    fs, path = filesystem(checkpoint_dir)
    if fs.exists(f"{path.rstrip('/')}/metadata"):
        raise ConfigurationError(
            f"--checkpoint-dir {checkpoint_dir} holds a Spark checkpoint itself (the layout "
            f"before --checkpoint-dir became the parent of each group's): move its entries "
            f"({', '.join(CHECKPOINT_ENTRIES)}) into {checkpoint_dir.rstrip('/')}/<group>, or "
            f"give --checkpoint-dir its parent"
        )
