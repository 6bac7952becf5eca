"""The click-count processor group, Goka's canonical example.

Every click on ``user-clicks`` (key: user, value: the page) adds one to the user's count in the
group table ``clicks-table`` (Goka's int64 codec, so Go services can read it).
"""

from __future__ import annotations

from typing import Any

from goka import Context, Int64Codec, StringCodec, define_group, input, persist

TOPIC = "user-clicks"
GROUP = "clicks"


def count(ctx: Context[int], page: Any) -> None:
    """Add one to the clicking user's count."""
    ctx.set_value((ctx.value() or 0) + 1)


graph = define_group(GROUP, input(TOPIC, StringCodec(), count), persist(Int64Codec()))
