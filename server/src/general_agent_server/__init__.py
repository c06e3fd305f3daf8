"""The General Agent Service: durable AI-agent sessions over gRPC."""

__version__ = "0.1.0"
API_VERSION = "general_agent.v1"
