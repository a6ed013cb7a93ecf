"""Imported first by the distributed harness's forkserver (dist_harness.PRELOAD): turns the garbage collector off
for the preload's imports (torch, transformers, numba, pandas: ~1.5 CPU s of collections over objects that live as
long as the process). rank_warmup, the last of them, collects once and freezes what is left; each rank turns the
collector back on (dist_harness `_worker`)."""

import gc

gc.disable()
