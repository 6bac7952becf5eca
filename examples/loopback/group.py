"""Re-keying through the loop topic: clicks arrive keyed by user, counts are kept per page.

A callback may only change the state of the key it is processing. To count per page, the
``by_user`` callback loops each click back under the page as key (``page-counts-loop``), and
``by_page`` then counts it in the group table, where the page is the key.
"""

from __future__ import annotations

from goka import Context, Int64Codec, StringCodec, define_group, input, loop, persist

GROUP = "page-counts"
CLICKS = "page-clicks"


def by_user(ctx: Context[int], page: str) -> None:
    """Send the click on, keyed by its page."""
    ctx.loopback(page, ctx.key)


def by_page(ctx: Context[int], user: str) -> None:
    """Count one click of the page (the current key)."""
    ctx.set_value((ctx.value() or 0) + 1)


graph = define_group(
    GROUP,
    input(CLICKS, StringCodec(), by_user),
    loop(StringCodec(), by_page),
    persist(Int64Codec()),
)
