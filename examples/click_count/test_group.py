"""Unit tests of the click-count group, written the way a user tests a group: with the tester."""

from examples.click_count.group import GROUP, TOPIC, graph
from goka.tester import Tester


def test_each_click_adds_one_to_the_users_count() -> None:
    tester = Tester(graph)
    for user in ["alice", "bob", "alice", "alice"]:
        tester.consume(TOPIC, user, "/index.html")
    assert tester.table_value(f"{GROUP}-table", "alice") == 3
    assert tester.table_value(f"{GROUP}-table", "bob") == 1


def test_counts_are_stored_as_goka_int64_text() -> None:
    tester = Tester(graph)
    tester.consume(TOPIC, "carol", "/")
    (record,) = tester.messages(graph.table)
    assert (record.key, record.value) == ("carol", b"1")  # what a Go Goka view reads
