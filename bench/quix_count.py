"""quixstreams doing the click count, or counting per key in tumbling 1-minute windows with
final results (grace 5 s), for bench/processor.py and bench/windows.py. Runs in its own
virtualenv (.venv-quix: quixstreams needs confluent-kafka < 2.13) and imports nothing from goka.

    python bench/quix_count.py BROKERS INPUT OUTPUT MESSAGES STATE_DIR [count|tumbling]

Prints ``elapsed <seconds> processed <count>`` when MESSAGES were read, or the exception.
"""

import sys
import time

from quixstreams import Application


def main() -> None:
    brokers, source, sink, expected, state_dir = sys.argv[1:6]
    how = sys.argv[6] if len(sys.argv) > 6 else "count"
    expected_count = int(expected)
    app = Application(
        broker_address=brokers, consumer_group=f"quix-{how}-{source}",
        auto_offset_reset="earliest", state_dir=state_dir, use_changelog_topics=True,
        consumer_extra_config={"fetch.wait.max.ms": 10},
        producer_extra_config={"linger.ms": 10, "partitioner": "fnv1a"},
    )  # fmt: skip
    done = {"count": 0, "started": None}

    def seen() -> None:
        if done["started"] is None:
            done["started"] = time.perf_counter()
        done["count"] += 1
        if done["count"] >= expected_count:
            app.stop()

    def count(value: object, key: object, timestamp: int, headers: object, state: object) -> int:
        total = state.get("count", 0) + 1  # type: ignore[attr-defined]
        state.set("count", total)  # type: ignore[attr-defined]
        seen()
        return total

    topic_in = app.topic(source, value_deserializer="bytes", key_deserializer="str")
    stream = app.dataframe(topic_in)
    if how == "count":
        stream = stream.apply(count, stateful=True, metadata=True)
        stream.to_topic(app.topic(sink, value_serializer="int", key_serializer="str"))
    else:
        stream = stream.update(lambda value: seen())
        stream = stream.tumbling_window(duration_ms=60_000, grace_ms=5_000).count().final()
        stream.to_topic(app.topic(sink, value_serializer="json", key_serializer="str"))
    started = time.perf_counter()
    app.run()
    print(f"elapsed {time.perf_counter() - started:.3f} processed {done['count']}", flush=True)


if __name__ == "__main__":
    main()
