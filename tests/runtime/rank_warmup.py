"""Imported once by the distributed harness's forkserver (dist_harness.PRELOAD), before it forks any rank: loads
the DP solver's compiled kernels (solvers/kernels.py `warm_up`, what every rank's first `train` otherwise pays:
numba's cache read, ~0.4 CPU s a rank), so the forked ranks start with them loaded. Imported last of the preload
before the cases' module, it then collects the garbage of the imports once (gc_paused turned the collector off) and
freezes every object left (`gc.freeze`, Python's documented step before forking workers from a prepared parent): a
rank's full collections then never walk the ~0.5 million objects of torch, transformers and the rest it inherits
(each walk ~0.1 CPU s, run every time DCP or an object collective unpickles; 12 CPU s of the p = 4 world's 66)."""

import gc

from paradyse_lab.solvers.kernels import warm_up

warm_up()
gc.collect()
gc.freeze()
