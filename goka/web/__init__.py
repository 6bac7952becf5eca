"""Goka's web side: HTTP/JSON table reads (:mod:`goka.web.tables`)."""

from goka.web.tables import Response, TableReads

__all__ = ["Response", "TableReads"]
