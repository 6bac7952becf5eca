"""A lost broker is reported as such, within the configured timeout, by the readers of
partition processors (not as a bare read timeout two minutes later)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from goka.dev.broker import EmbeddedBroker
from goka.errors import BrokerError
from goka.kafka.ranges import RangeReader

from .rewinds import write

pytestmark = pytest.mark.kafka


def test_a_read_from_a_lost_broker_fails_naming_it_within_the_timeout(
    make_broker: Callable[..., EmbeddedBroker],
) -> None:
    with make_broker() as broker:
        write(broker, "clicks", 10)
        reader = RangeReader(broker.bootstrap)
        try:
            assert sum(len(rows) for rows in reader.read(0, {"clicks": (0, 10)}, 10, 100)) == 10
            broker.stop()
            started = time.monotonic()
            with pytest.raises(BrokerError, match=rf"nothing read for 3s, the brokers "
                               rf"\({broker.bootstrap}\) cannot be reached: "):  # fmt: skip
                list(reader.read(0, {"clicks": (10, 20)}, 3, 100))
            assert time.monotonic() - started < 6
        finally:
            reader.close()
