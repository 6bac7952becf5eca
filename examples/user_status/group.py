"""User status: a click stream joined with user profiles and looked up against devices.

In the spirit of Goka's extended example:

* ``user-clicks`` (stream, key: user, value: ``{"page": ..., "device": ...}``)
* ``user-profiles`` (table, co-partitioned with the clicks, key: user) -- a **join**: the profile
  of the clicking user, read in the same task as the click
* ``devices`` (table, any partitioning, key: device id) -- a **lookup** of any key
* the group table ``user-status-table`` keeps per user: clicks, last page, country, last device
* every 10th click of a user is announced on ``user-milestones``
"""

from __future__ import annotations

from typing import Any

from goka import Context, JsonCodec, define_group, input, join, lookup, output, persist

GROUP = "user-status"
CLICKS, PROFILES, DEVICES, MILESTONES = "user-clicks", "user-profiles", "devices", "user-milestones"


def track(ctx: Context[dict[str, Any]], click: dict[str, Any]) -> None:
    """Update the user's status with one click."""
    status = ctx.value() or {"clicks": 0}
    profile = ctx.join(PROFILES) or {}
    device = ctx.lookup(DEVICES, click.get("device", "")) or {}
    status = {
        "clicks": status["clicks"] + 1,
        "last_page": click.get("page"),
        "country": profile.get("country", "unknown"),
        "last_device": device.get("kind", "unknown"),
    }
    ctx.set_value(status)
    if status["clicks"] % 10 == 0:
        ctx.emit(MILESTONES, ctx.key, {"clicks": status["clicks"], "country": status["country"]})


graph = define_group(
    GROUP,
    input(CLICKS, JsonCodec(), track),
    join(PROFILES, JsonCodec()),
    lookup(DEVICES, JsonCodec()),
    output(MILESTONES, JsonCodec()),
    persist(JsonCodec()),
)
