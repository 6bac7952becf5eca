"""How an epoch's tasks on one machine claim their shares of the partitions
(:mod:`goka.processing.claims`): each share once, the one a worker holds first."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from goka.errors import GokaError
from goka.processing.claims import claim_share

#: Four partitions in two shares, as a two-slot epoch plans them; and one in two.
TWO = [[0, 2], [1, 3]]
ONE = [[0], []]


def nobody(partition: int) -> str | None:
    return None


def held(here: set[int], elsewhere: set[int] | None = None) -> Callable[[int], str | None]:
    """Who holds each partition: ``here``, ``elsewhere`` or nobody."""
    return lambda p: "here" if p in here else "elsewhere" if p in (elsewhere or ()) else None


def test_with_nothing_held_each_task_takes_its_own_share(tmp_path: Path) -> None:
    assert claim_share(tmp_path, 1, 1, TWO, nobody) == 1
    assert claim_share(tmp_path, 1, 0, TWO, nobody) == 0


def test_a_task_takes_the_share_its_worker_holds_and_the_other_the_rest(tmp_path: Path) -> None:
    # the next epoch's tasks landed on each other's workers
    assert claim_share(tmp_path, 7, 0, TWO, held({1, 3}, {0, 2})) == 1
    assert claim_share(tmp_path, 7, 1, TWO, held({0, 2}, {1, 3})) == 0
    # one partition: the worker that holds it keeps it, the other takes the empty share
    assert claim_share(tmp_path, 8, 0, ONE, held(set(), {0})) == 1
    assert claim_share(tmp_path, 8, 1, ONE, held({0})) == 0


def test_a_task_holding_nothing_leaves_the_shares_held_elsewhere_to_their_holders(
    tmp_path: Path,
) -> None:
    shares = [[0], [1], [2]]  # three workers: the first two hold shares 0 and 1
    assert claim_share(tmp_path, 3, 0, shares, held(set(), {0, 1})) == 2
    assert claim_share(tmp_path, 3, 2, shares, held({1}, {0})) == 1
    assert claim_share(tmp_path, 3, 1, shares, held({0}, {1})) == 0


def test_more_of_a_share_held_here_wins_over_less(tmp_path: Path) -> None:
    shares = [[0, 2], [1, 3]]
    assert claim_share(tmp_path, 4, 0, shares, held({1, 3, 2})) == 1


def test_a_retried_task_takes_the_same_share_and_other_epochs_claims_go(tmp_path: Path) -> None:
    assert claim_share(tmp_path, 5, 0, TWO, held({1})) == 1
    assert claim_share(tmp_path, 5, 0, TWO, nobody) == 1  # its retry holds nothing any more
    assert claim_share(tmp_path, 5, 1, TWO, held({1})) == 0  # (share 1 is taken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["5-0", "5-1"]
    assert claim_share(tmp_path, 6, 0, TWO, nobody) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["6-0"]


def test_leftovers_of_a_killed_claim_go_unless_their_process_lives(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (tmp_path / f"9-0.{dead}.tmp").write_text("0")  # a task killed while it claimed
    (tmp_path / f"9-1.{os.getppid()}.tmp").write_text("1")  # one claiming now, elsewhere
    assert claim_share(tmp_path, 9, 0, TWO, nobody) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["9-0", f"9-1.{os.getppid()}.tmp"]


def test_tasks_claiming_at_once_each_get_a_share_and_every_share_is_taken(
    tmp_path: Path,
) -> None:
    tasks = 6
    shares = [[p] for p in range(tasks)]

    def claim(epoch: int, index: int, start: threading.Barrier, got: dict[int, int]) -> None:
        start.wait()  # all of them holding share 0: they all want it first
        got[index] = claim_share(tmp_path, epoch, index, shares, held({0}))

    for epoch in range(30):
        got: dict[int, int] = {}
        start = threading.Barrier(tasks)
        threads = [threading.Thread(target=claim, args=(epoch, i, start, got))
                   for i in range(tasks)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(got.values()) == list(range(tasks)), (epoch, got)


def test_more_tasks_than_shares_is_an_error_naming_the_epoch(tmp_path: Path) -> None:
    claim_share(tmp_path, 2, 0, ONE, nobody)
    claim_share(tmp_path, 2, 1, ONE, nobody)
    with pytest.raises(GokaError, match="task 2 of epoch 2: all 2 shares"):
        claim_share(tmp_path, 2, 2, ONE, nobody)
