"""Processes of a Spark session, read from Linux's /proc (for tests and their subprocesses)."""

from __future__ import annotations

from pathlib import Path


def parent(pid: int | str) -> int | None:
    """The parent process id of ``pid``; None if it exited meanwhile."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := parent(entry.name)) is not None:
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found
