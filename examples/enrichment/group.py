"""Enrichment through an HTTP service: orders keyed by user get the user's country from a
service (which answers in about 20 ms) and go on, enriched, to ``orders-enriched``; the group
table keeps each user's order count and country.

The callback awaits the service, so with ``concurrency=32`` up to 32 orders of a partition
wait at once instead of one: a partition does about 1,000 orders/s instead of 50. Orders of
one user still run one after the other, in offset order (the second sees the first's count);
orders of different users finish in any order, and their effects are released in offset
order all the same.

The service's address reaches the processor's workers in the callback's arguments
(``functools.partial``): ``graph(url)`` builds the group for one address.
"""

from __future__ import annotations

import atexit
import functools
from typing import Any

import aiohttp

from goka import Context, JsonCodec, define_group, input, output, persist
from goka.group.concurrent import await_on_loop
from goka.group.graph import GroupGraph

GROUP = "order-enrichment"
ORDERS = "orders"
ENRICHED = "orders-enriched"

_client: aiohttp.ClientSession | None = None


def client() -> aiohttp.ClientSession:
    """One HTTP client per process, kept from record to record (the callbacks of a process
    all run on one event loop, which outlives each batch of records)."""
    global _client
    if _client is None or _client.closed:
        _client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    return _client


@atexit.register
def _close() -> None:
    """Close the client on the loop that made it as the process ends."""
    if _client is not None and not _client.closed:
        await_on_loop(_client.close())


async def enrich(service: str, ctx: Context[dict[str, Any]], order: dict[str, Any]) -> None:
    """Ask the service for the user's country, count the order, send it on enriched."""
    async with client().get(f"{service}/users/{ctx.key}") as answer:
        answer.raise_for_status()
        country = (await answer.json())["country"]
    user = ctx.value() or {"orders": 0}
    user = {"orders": user["orders"] + 1, "country": country}
    ctx.set_value(user)
    ctx.emit(ENRICHED, ctx.key, {**order, "country": country, "nth": user["orders"]})


def graph(service: str) -> GroupGraph:
    """The group, asking the service at ``service`` (its base URL)."""
    return define_group(
        GROUP,
        input(ORDERS, JsonCodec(), functools.partial(enrich, service)),
        output(ENRICHED, JsonCodec()),
        persist(JsonCodec()),
        concurrency=32,
    )
