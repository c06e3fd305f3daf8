"""File tools: read, write, edit, apply_patch, glob, grep, all confined to the session workspace."""
