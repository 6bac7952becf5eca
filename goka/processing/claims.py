"""Which share of an epoch's partitions a task takes, where all of a processor's tasks run on
one machine (a local session): the share whose stores its Python worker holds, if it can.

An epoch's tasks start at once, and Spark gives each to whichever Python worker is idle first,
not to the one that ran it before: a share that changes workers is handed over (the other
worker's bridge ends, its stores close, LevelDB opens them again, under exactly-once a new
transactional producer fences the old one: 15-70 ms at ``bench.latency``'s boundaries, 86-220
ms under exactly-once, while the share's records wait). With one task per epoch the workers took
it in turns, so its partitions changed workers at every boundary. Instead, a local epoch has a
task per task slot (some with an empty share), every task is given every share, and each
*claims* one, in this order: the shares most of whose stores its own worker holds, then those
whose stores no other worker holds, then the rest; its own index first among equals. A claim
is a file ``<epoch>-<share>`` holding the task's index, made with ``link`` (atomic: it exists
whole or not at all; one task gets it): a retried task finds its index and takes the same
share again, and with as many tasks as shares each task finds one left. The claims of other
epochs are removed as a task claims (Spark begins an epoch once the last one's tasks ended).

On a cluster the tasks' machines do not share a directory: each task takes the share of its
index (the source plans no claims there).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from goka.errors import GokaError
from goka.storage.manifests import process_alive

__all__ = ["claim_share"]


def claim_share(
    directory: Path,
    epoch: int,
    index: int,
    shares: Sequence[Collection[int]],
    holder: Callable[[int], str | None],
) -> int:
    """Claim one of ``shares`` (partition numbers each) for task ``index`` of ``epoch`` (a
    number no other epoch of the processor has: its deadline) and return its number (see the
    module docstring). ``holder(p)``: who holds partition ``p``'s stores, ``"here"`` (this
    worker), ``"elsewhere"`` (another process) or None.

    Raises:
        GokaError: every share was claimed by other tasks (more tasks than shares).
    """
    directory.mkdir(parents=True, exist_ok=True)
    prefix = f"{epoch}-"
    for claim in directory.iterdir():
        if not claim.name.startswith(prefix) or claim.name.endswith(".tmp"):
            _forget(claim)
        elif _read(claim) == index:  # a retry of this task: its share again
            return int(claim.name[len(prefix) :])

    def rank(share: int) -> tuple[int, int, bool, int]:
        held = [holder(p) for p in shares[share]]
        return -held.count("here"), held.count("elsewhere"), share != index, share

    mine = directory / f"{prefix}{index}.{os.getpid()}.tmp"
    mine.write_text(str(index))
    try:
        for share in sorted(range(len(shares)), key=rank):
            try:
                os.link(mine, directory / f"{prefix}{share}")
            except FileExistsError:
                continue
            return share
    finally:
        mine.unlink()
    raise GokaError(f"task {index} of epoch {epoch}: all {len(shares)} shares of the partitions "
                    f"were claimed by other tasks ({directory})")  # fmt: skip


def _read(claim: Path) -> int | None:
    try:
        return int(claim.read_text())
    except (OSError, ValueError):
        return None


def _forget(claim: Path) -> None:
    """Remove a claim of another epoch (and a leftover of a task killed while claiming)."""
    if claim.name.endswith(".tmp"):
        pid = claim.name.split(".")[-2]
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)):
            return
    with contextlib.suppress(FileNotFoundError):
        claim.unlink()
