"""The gRPC transport: protobuf stops here. Servicers decode, call the domain services, encode."""
