"""The click-count graph on topics named by the environment, for processor subprocesses."""

import functools
import os
from collections.abc import Callable
from typing import Any

from examples.click_count.group import count
from goka import Int64Codec, StringCodec, define_group, input, output, persist
from goka.group.graph import GroupGraph
from tests.spark.crash import count_and_tell, count_and_tell_later

TOPIC = os.environ.get("GOKA_TEST_TOPIC", "crash-clicks")

graph = define_group(
    os.environ.get("GOKA_TEST_GROUP", "crash"),
    input(TOPIC, StringCodec(), count),
    persist(Int64Codec()),
)


def _telling(tell: Callable[..., Any], concurrency: int = 1) -> GroupGraph:
    """The count that also tells, for every click, which input record it was, with ``tell``
    (on ``<topic>-told``: an output per record, read back committed)."""
    return define_group(
        os.environ.get("GOKA_TEST_GROUP", "crash"),
        input(TOPIC, StringCodec(), functools.partial(tell, f"{TOPIC}-told")),
        persist(Int64Codec()),
        output(f"{TOPIC}-told", StringCodec()),
        concurrency=concurrency,
    )


#: The count telling each click (the writer-change and cluster tests).
told = _telling(count_and_tell)
#: :data:`told` with 64 records of a partition in flight: the count awaits at random, and tells
#: which of its key's clicks each record was (``tests.spark.model.out_of_order`` checks it).
told_later = _telling(count_and_tell_later, concurrency=64)
