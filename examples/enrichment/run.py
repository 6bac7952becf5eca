"""Run the enrichment group on Spark against a broker and the service.

python -m examples.enrichment.run          # on an embedded broker, with the service here
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from examples.enrichment import service
from examples.enrichment.group import ENRICHED, ORDERS, graph
from goka import Emitter, JsonCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.kafka.consumer import read_to_end
from goka.spark import Processor
from goka.view import View

USERS = [f"user-{n}" for n in range(40)]


Enriched = list[tuple[str, Any]]


def run(brokers: str, workdir: Path, url: str, spark: Any = None,
        orders: int = 600) -> tuple[dict[str, Any], Enriched, Counter[str]]:  # fmt: skip
    """Return (the group table, the enriched orders as ``(user, order)`` in the order read,
    the orders sent per user)."""
    manager = TopicManager(brokers)
    manager.ensure_stream_exists(ORDERS, 4)
    manager.ensure_stream_exists(ENRICHED, 4)
    sent: Counter[str] = Counter()
    with Emitter(brokers, ORDERS, JsonCodec()) as emitter:
        for n in range(orders):
            user = USERS[n * 7 % len(USERS)]
            sent[user] += 1
            emitter.emit(user, {"order": n, "amount": n % 50 + 1})
        emitter.flush(30)
    group = graph(url)
    Processor(group, brokers, spark=spark, state_dir=workdir / "state",
              checkpoint_dir=workdir / "checkpoint").run_until_caught_up(timeout=300)  # fmt: skip
    enriched = [(r.key.decode(), JsonCodec().decode(r.value))
                for r in read_to_end(brokers, ENRICHED)]  # fmt: skip
    with View(brokers, group.table, JsonCodec()) as view:
        view.wait_recovered(60)
        return dict(view.items()), enriched, sent


def main() -> int:
    with (EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as scratch,
          service.running() as url):  # fmt: skip
        table, enriched, sent = run(broker.bootstrap, Path(scratch), url)
    for user in sorted(sent)[:5]:
        print(f"{user}: {table[user]} (sent {sent[user]})")
    right = all(table[u] == {"orders": n, "country": service.country_of(u)}
                for u, n in sent.items())  # fmt: skip
    print(f"{len(enriched)} orders enriched; every user's count and country right: {right}")
    return 0 if right and len(enriched) == sum(sent.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
