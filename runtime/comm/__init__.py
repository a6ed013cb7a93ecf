"""Comm."""
