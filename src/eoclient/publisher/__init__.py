"""publisher."""
