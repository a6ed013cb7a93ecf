"""The training loop (`loop.train`) and its parts: set-up, state, one optimizer step, its schedule, each step's
inputs, the plan's hand-off from rank 0, health checks, the per-step log, grouped steps."""
