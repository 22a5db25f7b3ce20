"""Fuzzing the reference server's doors with Hypothesis (issue 13, item 5)."""
