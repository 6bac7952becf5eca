from examples.loopback.group import CLICKS, graph
from goka.tester import Tester


def test_clicks_are_counted_per_page_through_the_loop() -> None:
    tester = Tester(graph)
    for user, page in [("ann", "/a"), ("bob", "/a"), ("ann", "/b")]:
        tester.consume(CLICKS, user, page)
    assert tester.table(graph.table) == {"/a": 2, "/b": 1}
    assert [(r.key, r.value) for r in tester.messages(graph.loop_topic)] == [
        ("/a", b"ann"),
        ("/a", b"bob"),
        ("/b", b"ann"),
    ]
