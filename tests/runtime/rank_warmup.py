"""Imported once by the distributed harness's forkserver (dist_harness.PRELOAD), before it forks any rank: loads
the DP solver's compiled kernels (solvers/kernels.py `warm_up`, what every rank's first `train` otherwise pays:
numba's cache read, ~0.4 CPU s a rank), so the forked ranks start with them loaded."""

from solvers.kernels import warm_up

warm_up()
