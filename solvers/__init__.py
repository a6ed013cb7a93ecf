"""Strategy-search solvers over a `SearchProblem` (DESIGN.md section 4). Built by the solvers issue."""
