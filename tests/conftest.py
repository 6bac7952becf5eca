from __future__ import annotations

import pytest
from hypothesis import settings

import goka.emitter

#: No deadline for a generated example: make test's two workers keep this machine's two cores
#: busy, and an example that takes 285 ms there is slow, not wrong (a timeout still ends a hang).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
#: ``pytest --hypothesis-profile search``: generated tests search ten times longer (minutes).
settings.register_profile("search", max_examples=1_000, deadline=None)

pytest_plugins = [
    "goka.dev.pytest_plugin",
    "tests.unit.machines",
    "tests.spark.fixtures",
    "tests.integration.rewinds",
    "tests.interop.gogoka",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--crash-sequences", type=int, default=0,
                     help="play tests/spark/test_crash.py's series of N generated crash "
                     "sequences")  # fmt: skip
    parser.addoption("--crash-seed", type=int, default=1,
                     help="seed of the first sequence of the crash series")  # fmt: skip
    parser.addoption("--crash-concurrency", type=int, default=1,
                     help="the concurrency of the crash series' group (its count awaits at "
                     "random above 1)")  # fmt: skip
    parser.addoption("--crash-storage", choices=("files", "s3"), default="files",
                     help="where the crash series keep snapshots, the sink series its Parquet "
                     "archive and the source series its files: files, or a bucket on the S3 "
                     "server")  # fmt: skip
    parser.addoption("--crash-graph", choices=("count", "timed"), default="count",
                     help="the group of the writer-change series: the click count, or the "
                     "windows, timers and TTL of tests/spark/timed.py")  # fmt: skip


#: The tests that play ``--crash-sequences``.
SERIES = ("test_a_series_of_generated_sequences_ends_exact",
          "test_a_series_of_overlapping_writers_ends_exactly_once",
          "test_killed_timed_groups_end_with_exact_windows_and_final_results_once",
          "test_killed_sink_jobs_end_with_exact_tables",
          "test_killed_file_sources_produce_each_row_once")  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A crash series takes up to a few minutes a sequence (or trial): give it the time. The
    files marked ``cost`` come first, costliest first, the rest in their order: make test's
    workers (``--dist loadfile --no-loadscope-reorder``) take files in this order, and a
    two-minute file started last would leave one worker idle for its time."""
    sequences = config.getoption("--crash-sequences")
    for item in items:
        if sequences and item.name in SERIES:
            item.add_marker(pytest.mark.timeout(600 * sequences))
    items.sort(key=_cost, reverse=True)  # (stable: each file's tests keep their order)


def _cost(item: pytest.Item) -> float:
    """The seconds its file's ``pytest.mark.cost`` says it costs make test (0: unmarked; a
    file's marker, so that a file is never split)."""
    module = item.getparent(pytest.Module)
    marker = module.get_closest_marker("cost") if module is not None else None
    return float(marker.args[0]) if marker is not None else 0.0


@pytest.fixture(params=["c", "python"])
def emitter_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with emitters on the C fast path (goka._speedups) and on the pure-Python one."""
    if request.param == "c":
        if goka.emitter.speedups is None:
            pytest.skip("goka._speedups is not built (or GOKA_NO_SPEEDUPS is set)")
    else:
        monkeypatch.setattr(goka.emitter, "speedups", None)
    return str(request.param)
