"""Window specs: which windows a time belongs to, checked against hand-written instants."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goka.errors import ConfigurationError
from goka.time.specs import remembered
from goka.windows import Calendar, Hopping, Session, Tumbling, Window

UTC = dt.UTC


def ms(text: str) -> int:
    """Milliseconds of an ISO time with its offset (written out by hand in the tests)."""
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def test_tumbling_windows_are_back_to_back_and_aligned_to_the_epoch() -> None:
    spec = Tumbling(minutes=1)
    assert spec.size == 60_000
    assert spec.windows(ms("2026-01-01T10:00:59.999+00:00")) == [
        Window(ms("2026-01-01T10:00:00+00:00"), ms("2026-01-01T10:01:00+00:00"))
    ]
    assert spec.windows(ms("2026-01-01T10:01:00+00:00"))[0].start == ms("2026-01-01T10:01:00+00:00")
    assert Tumbling(dt.timedelta(hours=1)) == Tumbling(hours=1) == Tumbling(3_600_000)


def test_hopping_windows_hold_a_time_in_size_over_advance_windows() -> None:
    spec = Hopping(dt.timedelta(minutes=5), dt.timedelta(minutes=1))
    at = ms("2026-01-01T10:07:30+00:00")
    starts = [w.start for w in spec.windows(at)]
    assert starts == [ms(f"2026-01-01T10:0{m}:00+00:00") for m in (3, 4, 5, 6, 7)]
    assert all(w.start <= at < w.end and w.end - w.start == 300_000 for w in spec.windows(at))
    assert len(spec.windows(ms("2026-01-01T10:05:00+00:00"))) == 5


def test_a_day_across_the_autumn_switch_in_berlin_is_25_hours() -> None:
    spec = Calendar("day", tz="Europe/Berlin")
    (window,) = spec.windows(ms("2026-10-25T12:00:00+01:00"))
    assert window == Window(ms("2026-10-25T00:00:00+02:00"), ms("2026-10-26T00:00:00+01:00"))
    assert window.end - window.start == 25 * 3_600_000
    (before,) = spec.windows(ms("2026-10-24T23:59:59.999+02:00"))
    assert before.end == window.start and before.end - before.start == 24 * 3_600_000


def test_a_day_across_the_spring_switch_is_23_hours_and_days_start_at_a_local_time() -> None:
    spec = Calendar("day", tz="Europe/Berlin", start="06:00")
    (window,) = spec.windows(ms("2026-03-29T12:00:00+02:00"))
    assert window == Window(ms("2026-03-29T06:00:00+02:00"), ms("2026-03-30T06:00:00+02:00"))
    (early,) = spec.windows(ms("2026-03-29T05:59:00+02:00"))  # before 06:00: the day before
    assert early == Window(ms("2026-03-28T06:00:00+01:00"), ms("2026-03-29T06:00:00+02:00"))
    assert early.end - early.start == 23 * 3_600_000


def test_calendar_weeks_start_on_monday_and_months_on_the_first() -> None:
    (week,) = Calendar("week", tz="UTC").windows(ms("2026-11-25T08:00:00+00:00"))  # a Wednesday
    assert week == Window(ms("2026-11-23T00:00:00+00:00"), ms("2026-11-30T00:00:00+00:00"))
    (month,) = Calendar("month", tz="Europe/Berlin").windows(ms("2026-10-31T23:30:00+01:00"))
    assert month == Window(ms("2026-10-01T00:00:00+02:00"), ms("2026-11-01T00:00:00+01:00"))
    (dec,) = Calendar("month").windows(ms("2026-12-31T23:59:59+00:00"))
    assert dec.end == ms("2027-01-01T00:00:00+00:00")


def test_calendar_hours_follow_local_hours_in_zones_with_half_hour_offsets() -> None:
    (hour,) = Calendar("hour", tz="Asia/Kolkata").windows(ms("2026-01-01T10:15:00+05:30"))
    assert hour == Window(ms("2026-01-01T10:00:00+05:30"), ms("2026-01-01T11:00:00+05:30"))


def test_calendar_windows_tile_time_without_gaps_or_overlaps_across_a_year() -> None:
    spec = Calendar("day", tz="America/New_York", start="02:30")  # 02:30 is skipped once a year
    at, end = ms("2026-01-01T00:00:00+00:00"), ms("2027-01-01T00:00:00+00:00")
    (window,) = spec.windows(at)
    while window.end < end:
        (following,) = spec.windows(window.end)
        assert following.start == window.end and following.end > following.start
        assert spec.windows(following.end - 1) == [following]
        window = following


def test_calendar_specs_pickle_and_compare() -> None:
    spec = Calendar("day", tz="Europe/Berlin", start="06:00")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.windows(0) == spec.windows(0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Tumbling(0), "must be positive"),
        (lambda: Tumbling(dt.timedelta(seconds=-1)), "must be positive"),
        (lambda: Tumbling(), "must be positive"),
        (lambda: Tumbling(1000, hours=1), "not both"),
        (lambda: Hopping(60_000, 120_000), "must not exceed the size"),
        (lambda: Hopping(60_000, 25_000), "must divide the size"),
        (lambda: Session(0), "must be positive"),
        (lambda: Session("5m"), "timedelta or milliseconds"),  # type: ignore[arg-type]  # bad on purpose
        (lambda: Calendar("fortnight"), "unit must be one of"),  # type: ignore[arg-type]  # bad on purpose
        (lambda: Calendar("day", tz="Mars/Olympus"), "time zone 'Mars/Olympus' is unknown"),
        (lambda: Calendar("day", start="6am"), "'HH:MM'"),
        (lambda: Calendar("day", start="24:00"), "'HH:MM'"),
    ],
)
def test_invalid_specs_fail_when_built(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]  # the lambdas above


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([Tumbling(minutes=1), Hopping(300_000, 60_000), Hopping(7, 7),
                        Calendar("day", tz="Europe/Berlin")]),
       st.lists(st.integers(0, 10**13), min_size=1, max_size=600))  # fmt: skip
def test_remembered_windows_are_the_specs(
    spec: Tumbling | Hopping | Calendar, times: list[int]
) -> None:
    """Asked in any order, more buckets than it remembers (it forgets them all then), and
    again for times asked before (near ones share a bucket)."""
    windows = remembered(spec)
    for time in [*times, *(t + 1 for t in times), *times]:
        assert windows(time) == spec.windows(time)
