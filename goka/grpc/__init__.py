"""The gRPC view service: server, client and (in ``v1``) the code generated from ``proto/``."""

from goka.grpc.client import ClientTls, TableNotServedError, ViewClient, ViewInfo
from goka.grpc.server import TlsConfig, ViewServer

__all__ = ["ClientTls", "TableNotServedError", "TlsConfig", "ViewClient", "ViewInfo", "ViewServer"]
