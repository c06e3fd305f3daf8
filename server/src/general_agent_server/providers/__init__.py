"""Adapters of the model port to real providers."""
