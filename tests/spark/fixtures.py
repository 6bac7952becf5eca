"""The Spark tests' fixtures and shared helpers (a fixture module: the root conftest's
``pytest_plugins``): one local SparkSession for all of them, processors on it, clicks with
their counts, a table as a view serves it, and a processor running on a thread."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goka import Context, StringCodec
from goka.group.graph import GroupGraph
from goka.view import View

from ..helpers import produce


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
        kwargs.setdefault("mode", "micro-batch")  # (the suite's, written before continuous
        # became the default: a test of continuous mode says so)
        kwargs.setdefault("state_dir", tmp_path / "state")
        kwargs.setdefault("checkpoint_dir", tmp_path / "checkpoint")
        return Processor(graph, brokers, spark=spark, **kwargs)

    return make


def count(ctx: Context[int], msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def table_of(brokers: str, table: str, codec: Any) -> dict[str, Any]:
    with View(brokers, table, codec) as view:
        view.wait_recovered(60)
        return dict(view.items())


def clicks(brokers: str, topic: str, n: int, users: int = 40, seed: int = 1) -> Counter[str]:
    rng = random.Random(seed)
    sent: Counter[str] = Counter()
    items = []
    for _ in range(n):
        user = f"user-{rng.randrange(users)}"
        sent[user] += 1
        items.append((user, "/page"))
    produce(brokers, topic, StringCodec(), items)
    return sent


class Running:
    """A processor's ``run()`` on a thread."""

    def __init__(self, processor: Any) -> None:
        self.processor, self.error = processor, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.processor.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self, within: float) -> float:
        """Stop it; return how long it took."""
        started = time.monotonic()
        self.processor.stop()
        self.thread.join(within)
        assert not self.thread.is_alive(), f"still running {within}s after stop()"
        assert self.error is None, self.error
        return time.monotonic() - started
