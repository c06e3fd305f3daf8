"""Built-in tools. Each is a LocalTool with a real JSON Schema; paths are confined to the workspace."""
