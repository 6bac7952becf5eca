"""The click counts materialised into PostgreSQL: ``clicks-table`` (Goka's int64 codec) into
table ``clicks`` (``key``: the user, ``value``: the count), exactly once.

    CLICKS_DSN="host=... dbname=..." goka connect run examples.click_count.sinks:clicks \\
        --brokers ... --checkpoint ...
"""

from __future__ import annotations

import os

from goka import Int64Codec
from goka.connect import PostgresSink

TABLE = "clicks-table"


def clicks() -> PostgresSink:
    """The sink, on the database ``$CLICKS_DSN`` names."""
    return PostgresSink(TABLE, Int64Codec(), os.environ["CLICKS_DSN"], table="clicks")
