"""Run the page-count group on Spark against a broker.

python -m examples.loopback.run          # on an embedded broker
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from examples.loopback.group import CLICKS, graph
from goka import Emitter, Int64Codec, StringCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.spark import Processor
from goka.view import View


def run(brokers: str, workdir: Path, spark: Any = None) -> tuple[dict[str, int], Counter[str]]:
    """Return (counts per page in the group table, clicks sent per page)."""
    TopicManager(brokers).ensure_stream_exists(CLICKS, 4)
    sent: Counter[str] = Counter()
    with Emitter(brokers, CLICKS, StringCodec()) as clicks:
        for i in range(300):
            page = f"/page-{i % 7}"
            sent[page] += 1
            clicks.emit(f"user-{i % 11}", page)
        clicks.flush(30)
    Processor(graph, brokers, spark=spark, state_dir=workdir / "state",
              checkpoint_dir=workdir / "checkpoint").run_until_caught_up(timeout=300)  # fmt: skip
    with View(brokers, graph.table, Int64Codec()) as view:
        view.wait_recovered(60)
        return dict(view.items()), sent


def main() -> int:
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as scratch:
        counts, sent = run(broker.bootstrap, Path(scratch))
    for page in sorted(sent):
        print(f"{page}: {counts.get(page)} (sent {sent[page]})")
    return 0 if counts == dict(sent) else 1


if __name__ == "__main__":
    sys.exit(main())
