"""Files read and written safely: atomic writes and JSON read with exact types."""
