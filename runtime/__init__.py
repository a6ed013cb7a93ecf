"""torch.distributed runtime with the unified layout (DESIGN.md section 6). Built by the runtime issue."""
