"""quixstreams doing the click count, for bench/processor.py. Runs in its own virtualenv
(.venv-quix: quixstreams needs confluent-kafka < 2.13) and imports nothing from goka.

    python bench/quix_count.py BROKERS INPUT OUTPUT MESSAGES STATE_DIR

Prints ``elapsed <seconds> processed <count>`` when MESSAGES were counted, or the exception.
"""

import sys
import time

from quixstreams import Application


def main() -> None:
    brokers, source, sink, expected, state_dir = sys.argv[1:6]
    expected_count = int(expected)
    app = Application(
        broker_address=brokers, consumer_group=f"quix-{source}", auto_offset_reset="earliest",
        state_dir=state_dir, use_changelog_topics=True,
        consumer_extra_config={"fetch.wait.max.ms": 10},
        producer_extra_config={"linger.ms": 10, "partitioner": "fnv1a"},
    )  # fmt: skip
    done = {"count": 0, "started": None}

    def count(value: object, key: object, timestamp: int, headers: object, state: object) -> int:
        total = state.get("count", 0) + 1  # type: ignore[attr-defined]
        state.set("count", total)  # type: ignore[attr-defined]
        if done["started"] is None:
            done["started"] = time.perf_counter()
        done["count"] += 1
        if done["count"] >= expected_count:
            app.stop()
        return total

    topic_in = app.topic(source, value_deserializer="bytes", key_deserializer="str")
    topic_out = app.topic(sink, value_serializer="int", key_serializer="str")
    stream = app.dataframe(topic_in).apply(count, stateful=True, metadata=True)
    stream.to_topic(topic_out)
    started = time.perf_counter()
    app.run()
    print(f"elapsed {time.perf_counter() - started:.3f} processed {done['count']}", flush=True)


if __name__ == "__main__":
    main()
