from collections import Counter

from examples.hourly_views.group import PER_HOUR, VIEWS, graph
from goka.tester import Tester
from goka.time.rows import WINDOW_START

NOW = 1_800_000_000_000


def test_each_hour_of_each_user_gets_one_final_count_when_it_closes() -> None:
    tester = Tester(graph, now=NOW)
    views = [("ann", "10:05"), ("bob", "10:30"), ("ann", "10:59"), ("ann", "11:10"),
             ("bob", "10:50"), ("ann", "12:06")]  # fmt: skip
    for user, at in views:
        tester.consume(VIEWS, user, {"page": "/", "at": f"2027-01-10T{at}:00+00:00"})
    finals = Counter(
        (r.key, dict(r.headers)[WINDOW_START], r.value) for r in tester.messages(PER_HOUR)
    )
    ten, eleven = (str(1_799_575_200_000 + h * 3_600_000).encode() for h in (0, 1))
    # ann's 11:10 moved the stream time past 11:05: the 10 o'clock hours closed, and bob's
    # 10:50 came late; ann's 12:06 closed the 11 o'clock hour; the 12 o'clock one is open
    assert finals == Counter(
        {("ann", ten, b"2"): 1, ("bob", ten, b"1"): 1, ("ann", eleven, b"1"): 1}
    )
    assert tester.table(graph.table) == {"ann": 4, "bob": 2}


def test_a_view_after_its_hour_closed_is_late_and_not_counted() -> None:
    tester = Tester(graph, now=NOW)
    tester.consume(VIEWS, "ann", {"page": "/", "at": "2027-01-10T12:00:00+00:00"})
    tester.consume(VIEWS, "ann", {"page": "/", "at": "2027-01-10T10:30:00+00:00"})  # closed
    assert tester.windows(graph.group, "hourly", "ann")[0][1] == 1
    assert len(tester.windows(graph.group, "hourly", "ann")) == 1
