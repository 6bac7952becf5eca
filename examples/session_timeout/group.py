"""Close a user's session after 30 minutes without activity, with a wall-clock timer.

Every action of a user keeps their session open: the state holds when it started and how many
actions it had, and the timer ``idle`` is set (again) to 30 minutes after now on the wall
clock. When the timer fires (the user did nothing for 30 minutes, and no record needs to
arrive for it to fire), the session is emitted to ``sessions`` and the state deleted. Timers
are durable: they live in the partition store and ``session-timeout-timers``, so a restart
or a move of the partition neither loses nor repeats them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from goka import Context, JsonCodec, define_group, input, output, persist, timers
from goka.time.rows import Timer

GROUP = "session-timeout"
ACTIONS = "user-actions"
SESSIONS = "sessions"
IDLE = dt.timedelta(minutes=30)


def act(ctx: Context[dict[str, Any]], action: str) -> None:
    """An action: start or extend the user's session; it ends after IDLE of silence."""
    session = ctx.value() or {"started": ctx.wall_time_ms, "actions": 0}
    session["actions"] += 1
    ctx.set_value(session)
    ctx.schedule(IDLE, "idle", domain="wall")


def idle(ctx: Context[dict[str, Any]], timer: Timer) -> None:
    """The user was idle for IDLE: the session is over."""
    session = ctx.value()
    if session is not None:
        ctx.emit(SESSIONS, ctx.key, {**session, "ended": timer.at_ms})
        ctx.delete()


graph = define_group(
    GROUP,
    input(ACTIONS, JsonCodec(), act),
    timers(idle),
    output(SESSIONS, JsonCodec()),
    persist(JsonCodec()),
)
