"""Session workspaces: confinement checked at open, and durable file checkpoints."""
