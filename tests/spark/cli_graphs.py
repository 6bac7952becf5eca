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
    """The value: which Python process ran the callback, and where its pyspark came from."""
    import pyspark

    ctx.set_value(f"{os.getpid()} {pyspark.__file__}")


workers = define_group(f"{TOPIC}-workers", input(TOPIC, StringCodec(), note_worker),
                       persist(StringCodec()))  # fmt: skip
