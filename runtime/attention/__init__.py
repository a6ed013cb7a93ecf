"""Attention kernels that return the log-sum-exp (exact math and fused CUDA), over packed documents, over a
sequence gathered rank-major, and around a ring of ranks."""
