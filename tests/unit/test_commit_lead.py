"""Under exactly-once a continuous loop begins each commit early by the longest of its recent
commits' waits (goka.processing.epoch_partition.CommitLead), at most half the interval, so
that a record is visible about a commit interval after it was processed; under at-least-once
it does not."""

from __future__ import annotations

import time

from goka.processing.epoch_partition import LEAD_COMMITS, CommitLead


def test_the_lead_is_the_longest_recent_commit_at_most_half_the_interval() -> None:
    lead = CommitLead(0.1, whole=True)
    now = time.monotonic()
    assert 0.010 <= lead.took(now - 0.010) < 0.02
    assert 0.030 <= lead.took(now - 0.030) < 0.04
    assert 0.030 <= lead.took(time.monotonic() - 0.005) < 0.04  # the longest recent one
    assert lead.took(time.monotonic() - 0.5) == 0.05  # half the interval at most
    for _ in range(LEAD_COMMITS):  # the long ones age out
        fast = lead.took(time.monotonic() - 0.002)
    assert 0.002 <= fast < 0.01


def test_no_lead_under_at_least_once_or_without_an_interval() -> None:
    assert CommitLead(0.1, whole=False).took(time.monotonic() - 0.03) == 0.0
    assert CommitLead(0.0, whole=True).took(time.monotonic() - 0.03) == 0.0
