"""Training-run simulation over a workload (DESIGN.md section 5). Built by the simulator issue."""
