"""Exactly-once soak of the reference server and the SDK (issue 13, item 6)."""
