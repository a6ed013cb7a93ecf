"""Workload."""
