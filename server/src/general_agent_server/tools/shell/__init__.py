"""Shell tools: exec and process (background commands), run as a user that cannot read the server."""
