"""Measurement tools built on the runtime library; nothing in the library
imports them.

- profiler: `paradyse-lab costmodel profile`, one profile row per strategy and length (rank-local or distributed), its
  memory columns measured with profile_memory (kept activations, resident model states, the peak's reset);
- stack_profile, kernel_bench: layer-stack profiles and GEMM / attention efficiencies on one device;
- gpu_session (with gpu_session_plan, gpu_session_stages) and gpu_validate: the one-call GPU session,
  `python -m paradyse_lab.app.measure.gpu_session --out DIR`, and its prediction/measurement table;
- calibrate: `paradyse-lab calibrate --out DIR`, the machine's collectives, kernels and a profile (its options and
  budget in calibrate_options, its stages in calibrate_collectives, calibrate_kernels and calibrate_profile);
- pack_balance: `python -m paradyse_lab.app.measure.pack_balance DATASET --pack-tokens N`, how evenly the zig-zag layout
  of a packed step spreads attention over the ranks.

Every measurement records its software versions (`software_versions`).
"""
