"""Plan a training step with a solver, then train it on every rank, save and reload (docs/api.md).

    torchrun --standalone --nproc-per-node 2 examples/plan_and_train.py      # gloo on CPU, NCCL on GPUs
"""

import sys

import torch
import torch.distributed as dist

import paradyse_lab as pl


def main(out: str = "checkpoints", steps: int = 8) -> list[float]:
    plan = pl.plan_step("llama-tiny", p=dist.get_world_size(), seq_len=64, solver="dp", recompute=True)
    if dist.get_rank() == 0:
        print(f"plan {plan.strategies}: {plan.predicted_time_s * 1e3:.3f} ms predicted, memory {plan.memory}")
    model = pl.build_model("llama-tiny")  # the same seed on every rank; each keeps its 1/p shard
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 512, (1, 64), generator=torch.Generator().manual_seed(0))  # the same on every rank
    losses = [pl.train_step(model, plan, tokens, optimizer) for _ in range(steps)]
    pl.save(out, steps, model, optimizer)
    if dist.get_rank() == 0:
        print("losses", [round(x, 3) for x in losses])
    return losses


if __name__ == "__main__":
    dist.init_process_group("gloo")
    main(*sys.argv[1:2])
    dist.destroy_process_group()
