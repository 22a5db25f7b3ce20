"""Exactly-once soak of the reference server and the SDK."""
