"""Durable state: the SessionStore port and its SQLite adapter."""
