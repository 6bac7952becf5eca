"""The gRPC view service: server, client and (in ``v1``) the code generated from ``proto/``.

The client is part of the core install; the server (``goka.grpc.server``) needs the ``view``
extra. Both load when first used (the package imports nothing itself: its modules import the
generated code through it).
"""

from typing import TYPE_CHECKING

from goka._lazy import lazy_exports

if TYPE_CHECKING:
    from goka.errors import TableNotServedError
    from goka.grpc.client import ClientTls, ViewClient, ViewInfo
    from goka.grpc.server import TlsConfig, ViewServer

__all__ = ["ClientTls", "TableNotServedError", "TlsConfig", "ViewClient", "ViewInfo", "ViewServer"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "goka.errors": ("TableNotServedError",),
        "goka.grpc.client": ("ClientTls", "ViewClient", "ViewInfo"),
        "goka.grpc.server": ("TlsConfig", "ViewServer"),
    },
)
