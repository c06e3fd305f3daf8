"""File checkpoints: recorded around every mutating file tool, listed and restored linearly."""
