"""Launching ranks: under torchrun, as spawned local processes or alone, and the allocator setting they train with."""
