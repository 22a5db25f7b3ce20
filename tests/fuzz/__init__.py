"""Fuzzing the reference server's doors with Hypothesis."""
