"""quixstreams counting per key in tumbling 1-minute windows with final results (grace 5 s),
for bench/windows.py. Runs in its own virtualenv (.venv-quix) and imports nothing from goka.

    python bench/quix_windows.py BROKERS INPUT OUTPUT MESSAGES STATE_DIR

Prints ``elapsed <seconds> processed <count>`` when MESSAGES were read, or the exception.
"""

import sys
import time

from quixstreams import Application


def main() -> None:
    brokers, source, sink, expected, state_dir = sys.argv[1:6]
    expected_count = int(expected)
    app = Application(
        broker_address=brokers, consumer_group=f"quix-windows-{source}",
        auto_offset_reset="earliest", state_dir=state_dir, use_changelog_topics=True,
        consumer_extra_config={"fetch.wait.max.ms": 10},
        producer_extra_config={"linger.ms": 10, "partitioner": "fnv1a"},
    )  # fmt: skip
    done = {"count": 0, "started": None}

    def seen(value: object) -> None:
        if done["started"] is None:
            done["started"] = time.perf_counter()
        done["count"] += 1
        if done["count"] >= expected_count:
            app.stop()

    topic_in = app.topic(source, value_deserializer="bytes", key_deserializer="str")
    topic_out = app.topic(sink, value_serializer="json", key_serializer="str")
    stream = app.dataframe(topic_in).update(seen)
    stream = stream.tumbling_window(duration_ms=60_000, grace_ms=5_000).count().final()
    stream.to_topic(topic_out)
    started = time.perf_counter()
    app.run()
    print(f"elapsed {time.perf_counter() - started:.3f} processed {done['count']}", flush=True)


if __name__ == "__main__":
    main()
