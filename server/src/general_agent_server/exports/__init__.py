"""Files exported after commit: the transcript JSONL and the optional raw event log."""
