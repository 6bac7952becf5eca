from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goka.graph import GroupGraph


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for all Spark tests (it takes seconds to start)."""
    from goka.spark import build_session

    session = build_session("goka-tests", "local[2]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def make_processor(spark: Any, brokers: str, tmp_path: Path) -> Callable[..., Any]:
    """Build a processor on the shared session with state and checkpoint under tmp_path."""
    from goka.spark import Processor

    def make(graph: GroupGraph, **kwargs: Any) -> Any:
        kwargs.setdefault("state_dir", tmp_path / "state")
        kwargs.setdefault("checkpoint_dir", tmp_path / "checkpoint")
        return Processor(graph, brokers, spark=spark, **kwargs)

    return make
