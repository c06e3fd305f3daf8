"""The gRPC transport: protobuf stops here. Servicers validate, convert and call the core."""
