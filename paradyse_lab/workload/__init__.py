"""Workloads and data: the sequence lengths a run sees (and length files), documents packed into steps, real
text, and the zig-zag balance of a packed step."""
