"""The user-status group under the tester: join, lookup, output."""

from examples.user_status.group import CLICKS, DEVICES, MILESTONES, PROFILES, graph
from goka.tester import Tester


def test_status_combines_the_profile_and_the_device() -> None:
    tester = Tester(graph)
    tester.set_table_value(PROFILES, "ann", {"name": "Ann", "country": "NO"})
    tester.set_table_value(DEVICES, "d1", {"kind": "phone"})
    tester.consume(CLICKS, "ann", {"page": "/home", "device": "d1"})
    tester.consume(CLICKS, "bob", {"page": "/cart", "device": "d9"})
    assert tester.table_value(graph.table, "ann") == {
        "clicks": 1,
        "last_page": "/home",
        "country": "NO",
        "last_device": "phone",
    }
    assert tester.table_value(graph.table, "bob")["country"] == "unknown"


def test_every_tenth_click_is_announced() -> None:
    tester = Tester(graph)
    tester.set_table_value(PROFILES, "ann", {"country": "NO"})
    milestones = tester.queue_tracker(MILESTONES)
    for _ in range(20):
        tester.consume(CLICKS, "ann", {"page": "/", "device": "d1"})
    assert list(milestones) == [
        ("ann", {"clicks": 10, "country": "NO"}),
        ("ann", {"clicks": 20, "country": "NO"}),
    ]
