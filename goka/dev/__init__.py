"""Development helpers: the embedded broker and its pytest fixtures."""

from goka.dev.broker import BINARY_ENV, EmbeddedBroker, find_broker_binary

__all__ = ["BINARY_ENV", "EmbeddedBroker", "find_broker_binary"]
