import pytest

from examples.click_count import demo

pytestmark = pytest.mark.kafka


def test_demo_reads_back_every_click(brokers: str) -> None:
    sent, received = demo.run(brokers, clicks=1_000)
    assert sum(sent.values()) == 1_000
    assert received == sent
