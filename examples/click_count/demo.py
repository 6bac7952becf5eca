"""Click-count demo, first version: emit clicks to an embedded broker, read them back, summarise.

Run with ``make demo``. Later versions run the click-count processor group on Spark and query the
counts from a view over gRPC.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter

from goka import Emitter, Int64Codec, StringCodec, TopicManager
from goka.dev import EmbeddedBroker
from goka.kafka.consumer import read_to_end

TOPIC = "user-clicks"
USERS = [f"user-{i:02d}" for i in range(20)]
CLICKS = 5_000


def run(brokers: str, *, clicks: int = CLICKS, seed: int = 7) -> tuple[Counter[str], Counter[str]]:
    """Emit ``clicks`` random clicks; return (clicks sent per user, clicks read back per user)."""
    TopicManager(brokers).ensure_stream_exists(TOPIC, partitions=4)
    rng = random.Random(seed)
    sent: Counter[str] = Counter()
    with Emitter(brokers, TOPIC, Int64Codec()) as emitter:
        futures = []
        for _ in range(clicks):
            user = rng.choice(USERS)
            sent[user] += 1
            futures.append(emitter.emit(user, int(time.time() * 1000)))
        emitter.flush(30)
        for future in futures:
            future.result()  # raises if any click was not acknowledged
    received: Counter[str] = Counter()
    keys = StringCodec()
    for record in read_to_end(brokers, TOPIC):
        assert record.key is not None
        received[keys.decode(record.key)] += 1
    return sent, received


def main() -> int:
    started = time.monotonic()
    with EmbeddedBroker() as broker:
        print(f"embedded broker at {broker.bootstrap}")
        sent, received = run(broker.bootstrap)
    print(f"{'user':<10} {'sent':>6} {'read':>6}")
    for user in sorted(sent):
        print(f"{user:<10} {sent[user]:>6} {received[user]:>6}")
    ok = sent == received
    total = sum(received.values())
    verdict = "OK" if ok else "MISMATCH"
    print(f"{total} clicks read back in {time.monotonic() - started:.1f}s: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
