"""Graphs for ``goka processor run`` subprocesses, on topics named by the environment."""

import os
import time

from examples.click_count.group import count
from goka import Context, Int64Codec, StringCodec, define_group, input, persist

TOPIC = os.environ.get("GOKA_TEST_TOPIC", "cli-clicks")


def count_or_fail(ctx: Context[int], page: str) -> None:
    if page == "/boom":
        raise ValueError(f"cannot count page {page}")
    count(ctx, page)


failing = define_group(f"{TOPIC}-failing", input(TOPIC, StringCodec(), count_or_fail),
                       persist(Int64Codec()))  # fmt: skip
first = define_group(f"{TOPIC}-first", input(TOPIC, StringCodec(), count), persist(Int64Codec()))
second = define_group(f"{TOPIC}-second", input(TOPIC, StringCodec(), count), persist(Int64Codec()))


def count_slowly(ctx: Context[int], page: str) -> None:
    time.sleep(0.0005)  # a backlog takes seconds, so the monitor can watch the lag go down
    count(ctx, page)


slow = define_group(f"{TOPIC}-slow", input(TOPIC, StringCodec(), count_slowly),
                    persist(Int64Codec()))  # fmt: skip


def note_worker(ctx: Context[str], page: str) -> None:
    """The value: which Python process ran the callback, where its pyspark came from, whether
    it loaded pandas, and what the Python processes of its Spark session run."""
    import sys

    import pyspark

    ctx.set_value(f"{os.getpid()} {pyspark.__file__} pandas={'pandas' in sys.modules} "
                  f"{','.join(sorted(_session_modules()))}")  # fmt: skip


def _session_modules() -> set[str]:
    """The modules the JVM's Python processes run (the last word of their command lines;
    this worker's parent is its daemon, whose parent is the JVM)."""
    from tests.spark.procs import descendants, parent

    found = set()
    for pid in descendants(parent(os.getppid()) or 0):
        try:
            with open(f"/proc/{pid}/cmdline") as cmdline:
                words = [w for w in cmdline.read().split("\0") if w]
        except OSError:  # gone meanwhile
            continue
        if "-m" in words:
            found.add(words[-1])
    return found


workers = define_group(f"{TOPIC}-workers", input(TOPIC, StringCodec(), note_worker),
                       persist(StringCodec()))  # fmt: skip
