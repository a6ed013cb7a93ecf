"""Training checkpoints: the checkpoint folder and its lock, and torch.distributed.checkpoint entries that resume
at any world size."""
