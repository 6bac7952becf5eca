"""KeyOrder against its contract, with records finishing in generated orders: a record starts
only after every earlier record of its key finished, never more than ``limit`` run at once,
a record of a busy key holds back only its key, and records are released once each, in
order, only after every earlier one finished."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goka.errors import ConfigurationError
from goka.group.key_order import KeyOrder


@given(keys=st.lists(st.sampled_from("aaaabcdef"), max_size=60),
       limit=st.integers(1, 8), data=st.data())  # fmt: skip
def test_records_start_in_key_order_within_the_limit_and_leave_in_offset_order(
    keys: list[str], limit: int, data: st.DataObject
) -> None:
    order = KeyOrder(limit)
    admitted = 0
    started: list[int] = []
    finished: set[int] = set()
    released: list[int] = []
    running: set[int] = set()
    while len(released) < len(keys):
        actions = (["admit"] if admitted < len(keys) else []) + (["finish"] if running else [])
        assert actions, f"stuck: {len(released)} of {len(keys)} released, none in flight"
        if data.draw(st.sampled_from(actions), label="action") == "admit":
            assert order.admit(keys[admitted]) == admitted
            admitted += 1
        else:
            number = data.draw(st.sampled_from(sorted(running)), label="finishes")
            order.finish(number)
            running.remove(number)
            finished.add(number)
        starting = order.start()
        assert starting == sorted(starting)  # oldest first: none that may start is passed
        assert all(n in started or n in starting or n > max(starting, default=-1)
                   or any(keys[m] == keys[n] and m not in finished for m in range(n))
                   for n in range(admitted))  # fmt: skip
        for number in starting:
            assert number < admitted
            assert all(n in finished for n in range(number) if keys[n] == keys[number])
            assert number not in started
            started.append(number)
            running.add(number)
        assert len(running) == order.in_flight <= limit
        if len(running) < limit:  # nothing that may start waits (a busy key holds back only
            assert all(n in started  # its own later records)
                       or any(keys[m] == keys[n] and m not in finished for m in range(n))
                       for n in range(admitted))  # fmt: skip
        for number in order.release():
            assert number == len(released)  # in order, each once
            assert all(n in finished for n in range(number + 1))
            released.append(number)
        assert order.released == len(released)
        assert order.pending == admitted - len(released)
    assert order.idle  # nothing kept for the records released


def test_an_unhashable_key_is_refused_without_holding_back_the_records_after_it() -> None:
    order = KeyOrder(2)
    order.admit("a")
    with pytest.raises(TypeError):
        order.admit(["not", "hashable"])
    assert order.admit("b") == 1
    assert order.start() == [0, 1]
    order.finish(1)
    order.finish(0)
    assert order.release() == [0, 1]
    assert order.idle


def test_a_hot_key_holds_back_only_itself() -> None:
    order = KeyOrder(4)
    numbers = [order.admit(k) for k in ["hot", "hot", "hot", "cold", "hot", "other"]]
    assert order.start() == [0, 3, 5]  # the hot key's later records wait for its first
    order.finish(3)
    assert order.release() == []  # record 0 is still in flight
    order.finish(0)
    assert order.start() == [1]
    assert order.release() == [0]
    order.finish(5)
    order.finish(1)
    assert order.start() == [2]
    assert order.release() == [1]
    order.finish(2)
    assert order.start() == [4]
    assert order.release() == [2, 3]
    order.finish(4)
    assert order.release() == [4, 5]
    assert order.pending == 0 and order.released == len(numbers)


def test_finishing_a_record_not_in_flight_is_refused() -> None:
    order = KeyOrder(1)
    order.admit("a")
    order.admit("b")
    with pytest.raises(ValueError, match="record 1 is not in flight"):
        order.finish(1)
    order.start()
    order.finish(0)
    with pytest.raises(ValueError, match="record 0 is not in flight"):
        order.finish(0)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "4"])
def test_a_limit_that_is_not_a_whole_number_of_at_least_one_is_refused(limit: object) -> None:
    with pytest.raises(ConfigurationError, match="concurrency must be a whole number"):
        KeyOrder(limit)  # type: ignore[arg-type]  # (what a user may pass)
