"""The model port and its clients: the Anthropic adapter and an in-process scripted client."""
