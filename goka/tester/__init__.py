"""In-process testing of group graphs, without Kafka or Spark (like Go Goka's tester)."""

from goka.tester.producer import TesterProducer
from goka.tester.tester import QueueTracker, Record, Tester

__all__ = ["QueueTracker", "Record", "Tester", "TesterProducer"]
