"""Run the user-status group on Spark against a broker: profiles and devices first, then clicks.

python -m examples.user_status.run          # on an embedded broker
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from examples.user_status.group import CLICKS, DEVICES, MILESTONES, PROFILES, graph
from goka import Emitter, JsonCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.kafka.consumer import read_to_end
from goka.spark import Processor
from goka.view import View

USERS = {"ann": "NO", "bob": "DE", "cem": "TR"}


def run(brokers: str, workdir: Path, spark: Any = None) -> tuple[dict[str, Any], list[Any]]:
    """Return (the group table, the milestones emitted)."""
    manager = TopicManager(brokers)
    manager.ensure_stream_exists(CLICKS, 4)
    manager.ensure_table_exists(PROFILES, 4)
    manager.ensure_table_exists(DEVICES, 2)  # a lookup table needs no co-partitioning
    manager.ensure_stream_exists(MILESTONES, 4)
    with Emitter(brokers, PROFILES, JsonCodec()) as profiles:
        for user, country in USERS.items():
            profiles.emit_sync(user, {"country": country})
    with Emitter(brokers, DEVICES, JsonCodec()) as devices:
        devices.emit_sync("d1", {"kind": "phone"})
        devices.emit_sync("d2", {"kind": "laptop"})
    with Emitter(brokers, CLICKS, JsonCodec()) as clicks:
        for i in range(60):
            user = list(USERS)[i % 3]
            clicks.emit(user, {"page": f"/p{i}", "device": "d1" if i % 2 else "d2"})
        clicks.flush(30)
    Processor(graph, brokers, spark=spark, state_dir=workdir / "state",
              checkpoint_dir=workdir / "checkpoint").run_until_caught_up(timeout=300)  # fmt: skip
    with View(brokers, graph.table, JsonCodec()) as view:
        view.wait_recovered(60)
        table = dict(view.items())
    milestones = [JsonCodec().decode(r.value or b"null") for r in read_to_end(brokers, MILESTONES)]
    return table, milestones


def main() -> int:
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as scratch:
        table, milestones = run(broker.bootstrap, Path(scratch))
    for user, status in sorted(table.items()):
        print(f"{user}: {status}")
    print(f"milestones: {milestones}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
