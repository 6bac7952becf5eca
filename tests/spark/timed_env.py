"""The timed group of ``tests/spark/timed.py`` on the topic the environment names, for
processor subprocesses (``GOKA_TEST_TOPIC``)."""

import os

from tests.spark.timed import timed_graph

graph = timed_graph(os.environ.get("GOKA_TEST_TOPIC", "timed-events"))
