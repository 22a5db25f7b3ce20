"""Tier 3: the same scenarios against the reference server and Google's emulator."""
