"""Launch."""
