"""Where a group's state lives, whatever the number of groups a command runs: its stores in
``<state_dir>/<group>/`` (``partition-N``, ``join-<table>-N``), its Spark checkpoint in
``<state_dir>/<group>/checkpoint`` unless one is given (``goka processor run
--checkpoint-dir C``: ``C/<group>``).

Until 2026-11, ``goka processor run`` nested both once more when it ran several groups
(``<state_dir>/<group>/<group>/partition-N``), and took ``--checkpoint-dir`` as the
checkpoint itself when it ran one. :func:`move_nested` and :func:`move_flat_checkpoint` move
what they find in those places to the one layout, once, and say so (a task that found no
store would otherwise rebuild it from the changelog, and leave the old one behind)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from goka.errors import ConfigurationError

__all__ = ["move_flat_checkpoint", "move_nested"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_checked: set[Path] = set()


def move_nested(state_dir: str | Path, group: str) -> list[str]:
    """Move what ``<state_dir>/<group>/<group>/`` holds (the nested layout) up into
    ``<state_dir>/<group>/``, entry by entry, where nothing of that name is yet; remove the
    nested directory once empty. Checked once per process and group directory; processes that
    move at once each move what is left (a rename is atomic). Returns the entries moved."""
    root = Path(state_dir) / group
    with _lock:
        if root in _checked:
            return []
        _checked.add(root)
        nested = root / group
        if not nested.is_dir():
            return []
        moved = []
        for entry in sorted(nested.iterdir()):
            target = root / entry.name
            if target.exists():
                continue
            try:
                os.rename(entry, target)
            except FileNotFoundError:  # (another process moved it)
                continue
            moved.append(entry.name)
        with contextlib.suppress(OSError):  # (what is left there stays, said below)
            nested.rmdir()
    if moved:
        log.warning("group %s: moved %s from %s to %s (one state layout whatever the number "
                    "of groups: <state-dir>/<group>/)%s", group, ", ".join(moved), nested, root,
                    "" if not nested.exists() else f"; {nested} still holds entries of names "
                    f"{root} has too: remove it once {root} is right")  # fmt: skip
    return moved


def move_flat_checkpoint(checkpoint_dir: str, groups: Sequence[str]) -> str | None:
    """Move a Spark checkpoint that ``checkpoint_dir`` holds itself (the layout of one group,
    before ``--checkpoint-dir`` became the parent of each group's) into
    ``<checkpoint_dir>/<group>``. Its group is the one its snapshots are of
    (``state/<group>``), else the only one given. Local paths only (a URL is left as it is).
    Returns the group whose checkpoint moved, or None.

    Raises:
        ConfigurationError: the checkpoint cannot be told to be one of ``groups``'.
    """
    if "://" in checkpoint_dir:
        return None
    root = Path(checkpoint_dir)
    pending = [g for g in groups if (root / f".{g}.moving").is_dir()]  # (a move cut short)
    if not pending and not (root / "metadata").is_file():
        return None
    snapshots = [p.name for p in (root / "state").glob("*") if p.is_dir()]
    owners = pending or [g for g in groups if g in snapshots] or (
        list(groups) if len(groups) == 1 else [])  # fmt: skip
    if len(owners) != 1 or (root / owners[0]).exists():
        raise ConfigurationError(
            f"--checkpoint-dir {checkpoint_dir} holds one group's Spark checkpoint (the layout "
            f"before --checkpoint-dir became the parent of each group's): move its entries "
            f"into {checkpoint_dir}/<group>, the group that wrote it"
        )
    group = owners[0]
    moving = root / f".{group}.moving"
    moving.mkdir(exist_ok=True)
    for entry in list(root.iterdir()):
        if entry.name not in groups and not entry.name.endswith(".moving"):
            os.rename(entry, moving / entry.name)
    os.rename(moving, root / group)
    log.warning("group %s: moved its Spark checkpoint from %s to %s (--checkpoint-dir is "
                "the parent of each group's checkpoint)", group, root, root / group)  # fmt: skip
    return group
