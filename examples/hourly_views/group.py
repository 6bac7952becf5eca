"""Page views per user per hour, with one final result per hour.

Views arrive keyed by user, each with the time it happened (``at``, ISO 8601): that is the
event time, whatever the record's Kafka timestamp. Each view counts in its hour's window of
the window table ``hourly`` (changelog ``hourly-views-window-hourly``, readable by views while
the hour is open). An hour closes when the partition's stream time passes its end plus five
minutes of grace; then its count goes to ``views-per-hour`` once, also across crashes. A view
that arrives after its hour closed is late: it goes to the dead-letter topic.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from goka import (
    Context,
    Int64Codec,
    JsonCodec,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    window,
)

GROUP = "hourly-views"
VIEWS = "page-views"
PER_HOUR = "views-per-hour"


def viewed_at(view: dict[str, Any]) -> dt.datetime:
    """A view's event time: when it happened, as the producer recorded it."""
    return dt.datetime.fromisoformat(view["at"])


def count(ctx: Context[int], view: dict[str, Any]) -> None:
    """Count the view in its hour, and in the user's total."""
    ctx.window("hourly").update(lambda n: (n or 0) + 1)
    ctx.set_value((ctx.value() or 0) + 1)


graph = define_group(
    GROUP,
    input(VIEWS, JsonCodec(), count, event_time=viewed_at),
    window("hourly", Tumbling(hours=1), Int64Codec(), grace=dt.timedelta(minutes=5),
           emit="final", output=PER_HOUR, late="dead-letter"),
    output(PER_HOUR, Int64Codec()),
    persist(Int64Codec()),
)  # fmt: skip
