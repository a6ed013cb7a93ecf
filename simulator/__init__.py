"""Training-run simulation over a workload (docs/design.md section 5)."""
