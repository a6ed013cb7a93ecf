"""Attention."""
