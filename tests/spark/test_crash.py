"""SIGKILL the whole processor (driver, JVM, Python workers) in generated sequences of runs,
each run with its own random configuration (mode, rate limit, epoch and trigger lengths,
snapshots, machine), killed at a random moment or a named point, until a last run catches up;
then the group table topic, the partition stores and a view must all equal the truth, and a
``read_committed`` reader must find every click's output: once under exactly-once, at least
once under at-least-once (``tests/spark/model.py``).

The suite plays five sequences whose first runs are killed: where the mode-switch defect
was (at-least-once); between outputs acknowledged and their commit (exactly-once: inside the
transaction); during a restore after a kill during an upload (at-least-once); after a
transaction committed, then after the store's write (exactly-once, with 64 records of a
partition in flight: the count awaits at random, records finish out of order, and every
key's outputs must come in its input order); while a transactional producer starts, then
while a commit is aborted (exactly-once). Each run costs the suite about 15 s; the series
below draws kills, guarantees and configurations at random (``--crash-concurrency 64``:
with records in flight).
``pytest tests/spark/test_crash.py --crash-sequences 30`` plays a series of random sequences
(``--crash-seed`` picks it) and prints one line per sequence: its seed (replay one with
``--crash-seed SEED --crash-sequences 1``), its runs and kills, its duplicate outputs and its
table records per click.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .crash import crash_storage
from .model import generate, play

pytestmark = [pytest.mark.cost(265), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

#: The suite's sequences: where their first runs are killed, their most kills, guarantee and
#: concurrency (64: records of a partition in flight, their callbacks finishing out of order).
SUITE = [
    (("first-epoch",), 2, "at-least-once", 1),
    (("flush",), 1, "exactly-once", 1),
    (("restore",), 1, "at-least-once", 1),
    (("transaction", "commit"), 2, "exactly-once", 64),
    (("init", "abort"), 2, "exactly-once", 1),
]


@pytest.mark.parametrize(("first_kills", "most", "guarantee", "concurrency"), SUITE,
                         ids=["-".join(kills) for kills, *_ in SUITE])  # fmt: skip
def test_a_generated_sequence_of_killed_runs_ends_exact(
    first_kills: tuple[str, ...], most: int, guarantee: str, concurrency: int, brokers: str,
    new_topic: Callable[..., str], tmp_path: Path, request: pytest.FixtureRequest,
    record_property: Callable[[str, object], None],
) -> None:  # fmt: skip
    index = [kills for kills, *_ in SUITE].index(first_kills)
    seed = 1000 * request.config.getoption("--crash-seed") + index
    sequence = generate(seed, first_kills, most_kills=most, guarantee=guarantee,
                        concurrency=concurrency)  # fmt: skip
    outcome = play(sequence, brokers, new_topic, tmp_path)
    record_property("duplicate_outputs", outcome.duplicates)
    print(f"\n{outcome.line(sequence)}")
    assert outcome.kills >= 1, outcome.line(sequence)


def test_a_series_of_generated_sequences_ends_exact(
    brokers: str, new_topic: Callable[..., str], tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    count = request.config.getoption("--crash-sequences")
    if not count:
        pytest.skip("a long series: run with --crash-sequences N")
    first = request.config.getoption("--crash-seed")
    snapshot_dir = crash_storage(request, "snapshots")
    seeds, kills, duplicates, unkilled, guarantees = [], [], [], [], []
    for seed in range(first, first + 2 * count):  # sequences no kill reached do not count
        if len(seeds) == count:
            break
        sequence = generate(seed, concurrency=request.config.getoption("--crash-concurrency"))
        outcome = play(sequence, brokers, new_topic, tmp_path_factory.mktemp(f"seed{seed}"),
                       snapshot_dir)  # fmt: skip
        print(f"\n{outcome.line(sequence)}", flush=True)
        if not outcome.kills:
            unkilled.append(seed)
            continue
        seeds.append(seed)
        kills.append(outcome.kills)
        duplicates.append(outcome.duplicates)
        guarantees.append("EOS" if sequence.guarantee == "exactly-once" else "ALOS")
    print(f"\n{len(seeds)} killed sequences, every one exact: seeds {seeds}; guarantees "
          f"{guarantees}; kills per sequence {kills}; duplicate outputs per sequence "
          f"{duplicates}; also exact but not counted (no kill reached): seeds {unkilled}")  # fmt: skip
    assert len(seeds) == count
