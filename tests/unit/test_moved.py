"""Import paths that moved keep working for a release, with a DeprecationWarning; the users'
paths (``from goka import ...``, ``goka.windows``) did not move."""

from __future__ import annotations

import importlib
import warnings

import pytest

import goka
import goka.windows
from goka.group import context, edges, graph
from goka.time import open_windows, rows


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("goka.context", "Context", context.Context),
        ("goka.graph", "define_group", graph.define_group),
        ("goka.graph", "persist", graph.persist),
        ("goka.edges", "window", edges.window),
        ("goka.windowing", "Windows", open_windows.Windows),
        ("goka.partition_time", "Timer", rows.Timer),
    ],
)
def test_a_moved_name_warns_and_is_the_same(old: str, name: str, new: object) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to goka\.(group|time)\."):
        assert getattr(module, name) is new
    with pytest.raises(AttributeError):
        module.nothing_of_that_name  # noqa: B018


def test_the_users_paths_did_not_move() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert goka.Context is context.Context and goka.define_group is graph.define_group
        assert goka.Timer is rows.Timer and goka.Windows is open_windows.Windows
        assert goka.Tumbling is goka.windows.Tumbling
        assert callable(goka.windows.read_windows) and callable(goka.windows.stream_times)
        assert callable(goka.windows.window_key)
