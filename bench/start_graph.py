"""The click count over the topic named by ``$GOKA_BENCH_TOPIC``: the group that
``bench.processor`` starts with ``goka processor run`` to measure a cold start."""

from __future__ import annotations

import os

from goka import Context, Int64Codec, StringCodec, define_group, input, persist

TOPIC = os.environ.get("GOKA_BENCH_TOPIC", "bench-start")


def count(ctx: Context[int], page: object) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


graph = define_group(f"{TOPIC}-g", input(TOPIC, StringCodec(), count), persist(Int64Codec()))
