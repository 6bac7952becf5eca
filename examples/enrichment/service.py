"""The service the enrichment group asks: each user's country, answered after a delay (as a
remote service would), over HTTP on a loopback port (aiohttp's server).

    with running(delay=0.02) as url:   # http://127.0.0.1:<port>
        ...

It counts how many requests it had in flight at most (``/stats``): with the group's
``concurrency``, more than one.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

COUNTRIES = ("NO", "DE", "TR", "BR", "JP", "KE")


def country_of(user: str) -> str:
    """The country the service answers for ``user``."""
    return COUNTRIES[zlib.crc32(user.encode()) % len(COUNTRIES)]


@contextmanager
def running(delay: float = 0.02) -> Iterator[str]:
    """The service on a thread of its own, for the block: its base URL."""
    in_flight, most = 0, [0]

    async def user(request: web.Request) -> web.Response:
        nonlocal in_flight
        in_flight += 1
        most[0] = max(most[0], in_flight)
        try:
            await asyncio.sleep(delay)  # the service's own work
            return web.json_response({"country": country_of(request.match_info["user"])})
        finally:
            in_flight -= 1

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"most_in_flight": most[0]})

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.add_routes([web.get("/users/{user}", user), web.get("/stats", stats)])
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
