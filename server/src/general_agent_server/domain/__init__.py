"""The domain's types: frozen dataclasses and pure functions, no I/O, no grpc or protobuf."""
