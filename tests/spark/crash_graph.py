"""The click-count graph on topics named by the environment, for processor subprocesses."""

import os

from examples.click_count.group import count
from goka import Int64Codec, StringCodec, define_group, input, persist

graph = define_group(
    os.environ.get("GOKA_TEST_GROUP", "crash"),
    input(os.environ.get("GOKA_TEST_TOPIC", "crash-clicks"), StringCodec(), count),
    persist(Int64Codec()),
)
