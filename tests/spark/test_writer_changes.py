"""Exactly once while partitions change writers: generated sequences of processors of one
group whose runs overlap (``tests/spark/writers.py``), read back committed.

``make test`` plays a short chain of six writers in which every pair of modes changes writers
once, ``make test-slow`` a short sequence for each pair on its own and a series of 30 drawn
sequences (``pytest tests/spark/test_writer_changes.py -m longrun --crash-sequences N
--crash-seed S [--crash-concurrency C] [--crash-graph timed]``: N from seed S, the group's
callback awaiting with C records of a partition in flight; ``timed``: the group of
``tests/spark/timed.py``, windows with final results, stream timers and a TTL, its results
compared with the tester's over what the input topic holds) and prints one line per sequence
(its seed, how each writer started and ended, the writers fenced, the duplicate outputs)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from .writers import generate, play

pytestmark = [pytest.mark.cost(120), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

#: The mode pairs played: the first writer's, then the second's, which starts while the first
#: runs (the first ends a few seconds after the second's first producer).
PAIRS = (("available-now", "continuous"), ("continuous", "continuous"),
         ("continuous", "micro-batch"), ("micro-batch", "continuous"),
         ("continuous", "available-now"))  # fmt: skip
#: ``make test``'s chain: each writer starts while the one before it runs, so each pair of
#: :data:`PAIRS` changes writers once, in one sequence (about 2 minutes; five pairs on their
#: own take twice as long).
CHAIN = ("available-now", "continuous", "continuous", "micro-batch", "continuous",
         "available-now")  # fmt: skip


def test_a_chain_of_writers_changing_in_every_pair_of_modes_ends_exactly_once(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    assert sorted(itertools.pairwise(CHAIN)) == sorted(PAIRS)
    sequence = generate(1000 * request.config.getoption("--crash-seed") + len(PAIRS), CHAIN)
    outcome = play(sequence, brokers, new_topic, tmp_path)
    print(f"\n{outcome.line(sequence)}")


@pytest.mark.longrun  # (make test-slow: about 100 s each)
@pytest.mark.parametrize("modes", PAIRS, ids="-".join)
def test_overlapping_writers_end_exactly_once(
    modes: tuple[str, str], brokers: str, new_topic: Callable[..., str],
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    seed = 1000 * request.config.getoption("--crash-seed") + PAIRS.index(modes)
    sequence = generate(seed, modes)
    outcome = play(sequence, brokers, new_topic, tmp_path)
    print(f"\n{outcome.line(sequence)}")


#: The sequences ``make test-slow`` plays (about 90 s each).
SLOW_SEQUENCES = 30


@pytest.mark.longrun  # (make test-slow: about 45 minutes)
@pytest.mark.timeout(SLOW_SEQUENCES * 300)
def test_a_series_of_overlapping_writers_ends_exactly_once(
    brokers: str, new_topic: Callable[..., str], tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    count = request.config.getoption("--crash-sequences") or SLOW_SEQUENCES
    first = request.config.getoption("--crash-seed")
    fenced, killed = [], []
    concurrency = request.config.getoption("--crash-concurrency")
    graph = request.config.getoption("--crash-graph")
    for seed in range(first, first + count):
        sequence = generate(seed, concurrency=concurrency, graph=graph)
        outcome = play(sequence, brokers, new_topic, tmp_path_factory.mktemp(f"seed{seed}"))
        print(f"\n{outcome.line(sequence)}", flush=True)
        fenced.append(outcome.fenced)
        killed.append(outcome.killed)
    print(f"\n{count} sequences of writer changes, every one exact: seeds {first}.."
          f"{first + count - 1}; writers fenced per sequence {fenced}; killed {killed}")  # fmt: skip
