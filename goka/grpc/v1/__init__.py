"""Generated protobuf and gRPC code of ``proto/goka/view/v1/view.proto`` (``make proto``)."""
