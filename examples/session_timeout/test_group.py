import datetime as dt

from examples.session_timeout.group import ACTIONS, SESSIONS, graph
from goka.tester import Tester

NOW = 1_800_000_000_000


def test_a_session_ends_after_30_idle_minutes_without_any_record() -> None:
    tester = Tester(graph, now=NOW)
    sessions = tester.queue_tracker(SESSIONS)
    tester.consume(ACTIONS, "ann", "login")
    tester.advance_time(dt.timedelta(minutes=20))
    tester.consume(ACTIONS, "ann", "click")  # keeps the session open
    tester.advance_time(dt.timedelta(minutes=29))
    assert list(sessions) == []
    tester.advance_time(dt.timedelta(minutes=1))
    ended = NOW + 50 * 60_000
    assert list(sessions) == [("ann", {"started": NOW, "actions": 2, "ended": ended})]
    assert tester.table(graph.table) == {}
