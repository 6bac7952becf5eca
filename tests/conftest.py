from __future__ import annotations

import pytest

import goka.emitter

pytest_plugins = ["goka.dev.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--crash-trials", type=int, default=0,
                     help="run tests/spark/test_crash.py's random series of N trials")  # fmt: skip
    parser.addoption("--crash-seed", type=int, default=1, help="seed of the random series")
    parser.addoption("--crash-mode", default="micro-batch", choices=("micro-batch", "continuous"),
                     help="the processing mode of the random crash series")  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A random crash series takes about two minutes a trial: give it the time."""
    trials = config.getoption("--crash-trials")
    for item in items:
        if trials and item.name == "test_random_crash_series":
            item.add_marker(pytest.mark.timeout(240 * trials))


@pytest.fixture(params=["c", "python"])
def emitter_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with emitters on the C fast path (goka._speedups) and on the pure-Python one."""
    if request.param == "c":
        if goka.emitter.speedups is None:
            pytest.skip("goka._speedups is not built (or GOKA_NO_SPEEDUPS is set)")
    else:
        monkeypatch.setattr(goka.emitter, "speedups", None)
    return str(request.param)
