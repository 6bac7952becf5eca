"""quixstreams doing the click count, or counting per key in tumbling 1-minute windows or
hopping 5-minute windows advancing by a minute, with final results (grace 5 s), for
bench/processor.py, bench/windows.py and bench/peers. Runs in its own virtualenv (.venv-quix:
quixstreams needs confluent-kafka < 2.13) and imports nothing from goka.

    python bench/quix_count.py BROKERS INPUT OUTPUT MESSAGES STATE_DIR [count|tumbling|hopping]
        [at-least-once|exactly-once]

Prints ``elapsed <seconds> processed <count> peak_rss_kb <kB>`` when MESSAGES were read, or
the exception.
"""

import resource
import sys
import time

from quixstreams import Application


def main() -> None:
    brokers, source, sink, expected, state_dir = sys.argv[1:6]
    how = sys.argv[6] if len(sys.argv) > 6 else "count"
    guarantee = sys.argv[7] if len(sys.argv) > 7 else "at-least-once"
    expected_count = int(expected)
    group = f"quix-{how}-{guarantee}-{source}-{time.time_ns()}"  # a new group per run
    app = Application(
        broker_address=brokers, consumer_group=group,
        auto_offset_reset="earliest", state_dir=state_dir, use_changelog_topics=True,
        processing_guarantee=guarantee,
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
        windows = (
            stream.tumbling_window(duration_ms=60_000, grace_ms=5_000)
            if how == "tumbling"
            else stream.hopping_window(duration_ms=300_000, step_ms=60_000, grace_ms=5_000)
        )
        stream = windows.count().final()
        stream.to_topic(app.topic(sink, value_serializer="json", key_serializer="str"))
    started = time.perf_counter()
    app.run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"elapsed {time.perf_counter() - started:.3f} processed {done['count']} peak_rss_kb {peak}",
        flush=True,
    )


if __name__ == "__main__":
    main()
