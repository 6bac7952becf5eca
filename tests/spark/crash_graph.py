"""The click-count graph on topics named by the environment, for processor subprocesses."""

import functools
import os

from examples.click_count.group import count
from goka import Int64Codec, StringCodec, define_group, input, output, persist
from tests.spark.crash import count_and_tell, count_and_tell_later

TOPIC = os.environ.get("GOKA_TEST_TOPIC", "crash-clicks")

graph = define_group(
    os.environ.get("GOKA_TEST_GROUP", "crash"),
    input(TOPIC, StringCodec(), count),
    persist(Int64Codec()),
)

#: The same count telling, for every click, which input record it was (``<topic>-told``): an
#: output per record, read back committed by the writer-change tests.
told = define_group(
    os.environ.get("GOKA_TEST_GROUP", "crash"),
    input(TOPIC, StringCodec(), functools.partial(count_and_tell, f"{TOPIC}-told")),
    persist(Int64Codec()),
    output(f"{TOPIC}-told", StringCodec()),
)

#: :data:`told` with 64 records of a partition in flight: the count awaits at random, and tells
#: which of its key's clicks each record was (``tests.spark.model.out_of_order`` checks it).
told_later = define_group(
    os.environ.get("GOKA_TEST_GROUP", "crash"),
    input(TOPIC, StringCodec(), functools.partial(count_and_tell_later, f"{TOPIC}-told")),
    persist(Int64Codec()),
    output(f"{TOPIC}-told", StringCodec()),
    concurrency=64,
)
