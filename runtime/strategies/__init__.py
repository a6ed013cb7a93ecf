"""Strategies."""
