"""subscriber."""
