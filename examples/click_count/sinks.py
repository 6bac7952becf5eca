"""The click counts materialised into PostgreSQL, and the clicks archived to Parquet, exactly
once:

* ``clicks``: ``clicks-table`` (Goka's int64 codec) into table ``clicks`` (``key``: the user,
  ``value``: the count) on the database ``$CLICKS_DSN`` names;
* ``archive``: every click of ``user-clicks`` (``key``: the user, ``value``: the page) into
  Parquet files under ``$CLICKS_ARCHIVE`` (a directory or an fsspec URL), a directory per day.

    CLICKS_DSN="host=... dbname=..." goka connect run examples.click_count.sinks:clicks \\
        --brokers ... --checkpoint ...
    CLICKS_ARCHIVE=s3://bucket/clicks goka connect run examples.click_count.sinks:archive \\
        --brokers ... --checkpoint ...
"""

from __future__ import annotations

import os

from goka import Int64Codec, StringCodec
from goka.connect import ParquetSink, PostgresSink

from .group import TOPIC

TABLE = "clicks-table"


def clicks() -> PostgresSink:
    """The counts' sink, on the database ``$CLICKS_DSN`` names."""
    return PostgresSink(TABLE, Int64Codec(), os.environ["CLICKS_DSN"], table="clicks")


def archive() -> ParquetSink:
    """The clicks' archive, under ``$CLICKS_ARCHIVE``."""
    return ParquetSink(TOPIC, StringCodec(), os.environ["CLICKS_ARCHIVE"],
                       partition_by="date=%Y-%m-%d")  # fmt: skip
