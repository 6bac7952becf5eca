"""The gRPC view service: server, client and (in ``v1``) the code generated from ``proto/``.

The client is part of the core install; the server (``goka.grpc.server``) needs the ``view``
extra and loads when :class:`ViewServer` or :class:`TlsConfig` is first used.
"""

from typing import TYPE_CHECKING, Any

from goka.grpc.client import ClientTls, TableNotServedError, ViewClient, ViewInfo

if TYPE_CHECKING:
    from goka.grpc.server import TlsConfig, ViewServer

__all__ = ["ClientTls", "TableNotServedError", "TlsConfig", "ViewClient", "ViewInfo", "ViewServer"]


def __getattr__(name: str) -> Any:
    if name in ("TlsConfig", "ViewServer"):
        from goka.grpc import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
