"""Hooks and plugins: names and merge rules, the registry and runner, per-session dispatch, remote
registrations, in-process plugins."""
