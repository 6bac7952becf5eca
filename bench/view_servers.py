"""Servers for bench/view.py, each run in its own process (so clients and server do not share a
GIL): ``trivial`` answers every Get with a constant (gRPC's own ceiling); ``view`` serves a view.

    python -m bench.view_servers trivial
    python -m bench.view_servers view BROKERS TABLE
"""

from __future__ import annotations

import sys
import threading
from concurrent import futures
from typing import Any

import grpc

from goka import Int64Codec
from goka.grpc import ViewServer
from goka.grpc.v1 import view_pb2, view_pb2_grpc
from goka.view import View

WORKERS = 16


class Trivial(view_pb2_grpc.ViewServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.answer = view_pb2.GetResponse(found=True, value=b"12345", codec="int64")

    def Get(self, request: Any, context: Any) -> Any:
        return self.answer


def main() -> None:
    if sys.argv[1] == "trivial":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
        view_pb2_grpc.add_ViewServiceServicer_to_server(Trivial(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
    else:
        view = View(sys.argv[2], sys.argv[3], Int64Codec()).start()
        view.wait_recovered(300)
        server = ViewServer([view], max_workers=WORKERS, max_streams=4).start()  # type: ignore[assignment]
        port = server.port  # type: ignore[attr-defined]
    print(port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
