"""Security sinks: the SSRF guard and the one redactor of secrets."""
