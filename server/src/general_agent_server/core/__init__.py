"""The domain core: sessions, runs, events and the agent loop. No grpc or protobuf imports here."""
