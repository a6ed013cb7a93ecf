"""Everything this toolkit measures on one GPU, in one run under 10 minutes: GPU tests, kernel efficiencies
and the rank-local profiles of the paper's models, as files in one folder.

Command, on any machine with one CUDA GPU (writes DIR/env.json, session_log.json, pytest_gpu.txt, gemm.csv,
attention.csv, one profile per model, DIR/<device-kind>_<model>.csv, the replay model's tables in
DIR/kernels/: gemm.csv, attention.csv, elementwise.csv, dispatch.csv, and peers.csv):

    python -m paradyse_lab.app.measure.gpu_session --out DIR [--quick] [--device cuda|cpu] [--budget-s 540]

It imports only torch, numpy, pandas, networkx, tqdm and pytest (with pytest-timeout and hypothesis for the
GPU tests): paradyse_lab imports pandas and networkx where it uses them, never scikit-learn, OR-Tools or
matplotlib on these paths, so a machine with a CUDA build of torch needs no install of this package (run it
from a checkout, `PYTHONUNBUFFERED=1` to see progress). Without flash-attn, attention runs PyTorch's fused
flash kernel and its rows say `sdpa`; with flash-attn installed (`pip install -e ".[gpu]"`) they say
`flash-attn`. Then, e.g. for an H100:

    mkdir -p results/gpu-h100 && cp DIR/* results/gpu-h100/
    python -m paradyse_lab.app.measure.gpu_validate results/gpu-h100 \\
        --combine paradyse_lab/data/profiles/measured-rank-local_h100-80gb-x8.csv
    cp results/gpu-h100/gemm.csv paradyse_lab/data/profiles/h100-80gb_gemm.csv      # and attention.csv, env.json
    cp results/gpu-h100/kernels/* paradyse_lab/data/kernels/h100-80gb-x8/   # the replay model's tables
    paradyse-lab costmodel ablate --profiles paradyse_lab/data/profiles/measured-rank-local_h100-80gb-x8.csv \\
        --cluster h100-80gb-x8 --model gpt --format json

gpu_validate writes validation.md / validation.csv (prediction / measurement of compute time and peak memory
per model, strategy and length, pass within 10% / 5%, with the preset's and with the measured efficiencies)
for the README, and prints the measured `gemm_efficiency` / `attention_efficiency(_causal)` points to set in
the h100-80gb-x8 / h200-x8 cluster presets, citing the committed CSVs.

Stages (env, pytest, gemm, attention, kernels, profiles, peers, summary) run in that order, each guarded (the
pytest stage runs tests/gpu: the fused and the varlen attention kernels against the exact kernel with grouped-query
K/V heads, packed steps with GQA on one GPU, the strategies over NCCL with two or more GPUs): an error is
recorded in session_log.json (with its traceback) and the next stage runs. The peers stage runs
examples/peer_benchmark.py (the runtime's strategies beside torch TP + SP, FSDP2 + Ulysses, FSDP2 + ring and plain
torch; gloo ranks on the machine's CPUs) at 2K and 8K tokens and keeps its CSV as DIR/peers.csv; --quick leaves it
out unless --stages names it (it spawns gloo worlds: tens of seconds). A global budget (--budget-s,
counted from the start) ends the run in time: a stage that cannot start is recorded as skipped, and inside
gemm, attention and profiles every point that does not fit is recorded as skipped (never extrapolated).
CSVs are written atomically; a stage with no measured row writes no file. --quick runs tiny shapes (bert
with one layer at s = 64..128, p = 8; small GEMMs and attention): `--quick --device cpu --models bert-tiny` (bert's
layer at h 128: a sixty-fourth of its weights) is the CPU test of this script
(tests/paradyse_lab/app/measure/test_gpu_session.py), whose rows say device=cpu. Kernel and profile details:
the `kernel_bench` and `stack_profile` module docstrings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from paradyse_lab.app.measure.gpu_session_plan import (  # noqa: F401 - device_kind, STAGES: this command's API
    QUICK,
    QUICK_STAGES,
    STAGES,
    MeasurementPlan,
    Session,
    device_kind,
    now_utc,
)
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import UserInputError


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m paradyse_lab.app.measure.gpu_session", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to write (created)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (the CPU test of this script)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--budget-s", type=float, default=540.0, help="the whole run's time, seconds (default 540)")
    parser.add_argument("--stages", default=None, help=f"comma-separated subset of {','.join(STAGES)} (default: all; "
                        f"--quick: {','.join(QUICK_STAGES)})")
    parser.add_argument("--models", default="", help="models to profile (default bert,llama,gpt; --quick: bert)")
    args = parser.parse_args(argv)
    if args.stages is None:
        args.stages = ",".join(QUICK_STAGES if args.quick else STAGES)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad or args.budget_s < 0:
        print(f"gpu_session: error: unknown stage {bad[0]!r}; valid: {', '.join(STAGES)}" if bad else
              "gpu_session: error: --budget-s must be >= 0", file=sys.stderr)
        return 2
    if args.device == "cuda":
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    import torch  # lazy: torch takes seconds to load; only this path runs it

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_session: error: --device cuda but CUDA is not available (use --device cpu to test)",
              file=sys.stderr)
        return 2
    plan = QUICK if args.quick else MeasurementPlan()
    if args.models:
        plan = replace(plan, models=tuple(m.strip() for m in args.models.split(",") if m.strip()))

    try:
        with_head = [m for m in plan.models if get_model(m).embedding_and_head]
        if with_head:
            raise UserInputError(f"--models: {with_head[0]!r} has an embedding and head; this session profiles layer "
                                 "stacks (bert, llama, gpt); profile whole models with "
                                 "`paradyse-lab costmodel profile`")
    except UserInputError as err:
        print(f"gpu_session: error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    session = Session(out, args.budget_s, started, list(argv if argv is not None else sys.argv[1:]))
    threads = torch.get_num_threads()
    if args.device == "cpu":
        torch.set_num_threads(1)  # a shared 2-core machine stalls small kernels with more
    try:
        from paradyse_lab.app.measure import gpu_session_stages as st

        try:
            ctx = st.context(torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda"
                             else torch.device("cpu"), plan, args.quick, session)
        except Exception as err:  # noqa: BLE001 - recorded, then the run ends: no stage can run without it
            session.log["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            session.say(f"cannot start: {type(err).__name__}: {err}")
            return 1
        for name in STAGES:
            if name in stages:
                session.run_stage(name, lambda rec, name=name: getattr(st, f"stage_{name}")(ctx, rec),
                                  None if name == "env" else plan.min_s[name])
    finally:
        torch.set_num_threads(threads)
        session.log["finished"] = now_utc()
        session.save_log()
    session.say("done: " + ", ".join(f"{r['name']}={r['status']}" for r in session.log["stages"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
