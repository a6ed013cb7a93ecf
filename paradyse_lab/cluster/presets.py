"""The cluster presets (`PRESETS`: `ClusterSpec`s of A100, H100 and H200 nodes) and the hardware numbers they are
built from.

Every number carries its source key from docs/hardware.md (kind: P vendor peak, M measured, Mdl NCCL
model constant, E derived by us):

- peak dense bf16 FLOP/s, HBM bandwidth: datasheets [DS-A] [DS-H] (P).
- memory seen by CUDA: A100 81,251 / 40,441 MiB [DQ] (M); H100 81,559 MiB and H200 143,771 MiB as
  reported by nvidia-smi on an H100 80GB HBM3 and an H200 machine in 2026-11 (M).
- collective bus bandwidths (nccl-tests busbw convention [PERF]): A100 all_gather / reduce_scatter /
  all_reduce ~230 GB/s (tests#149, [AZ]); p2p 195 GB/s @1 GB [LP]; H100 ~370 (tests#212), alltoall 336
  (nccl#2169, 4 GPUs), p2p 371 (nccl#1264); H200 365 ring, p2p 396 [MLE-N] (M). A100 and H200 alltoall
  have no published 8-GPU number: E = their all_gather busbw x (336/370), H100's alltoall/all_gather ratio.
  Broadcast: E = the all_gather busbw (a pipelined ring broadcast runs at the effective link rate).
- bandwidth against message size: the fraction of the large-message busbw reached at 1 MB, 16 MB,
  256 MB and 2 GB, from Azure's all_reduce sweeps [AZ] (A100 36/109/214/230 GB/s; H100 44/234/423/472);
  applied to every collective (E); H200 uses H100's curve (E).
- latency alpha: NCCL's tuning model [TUNE], Ring LL base 6.6 us + 0.6 us per NVLink step (Mdl): the
  `ClusterSpec` defaults, which the presets keep.
- GEMM efficiency against the smallest matrix dimension: A100 cuBLASLt FP16 cubes 1k..16k =
  119.4/221.8/228.0/253.7/256.5 TFLOPS of 312 [AZ] (M). Hopper: E = the A100 curve scaled to H100's
  best-matmul fraction (794.5/989 = 80.3% [MLE-A]) over A100's (271.2/312 = 86.9%).
- attention (FlashAttention-2 fwd+bwd, d = 128) efficiency against sequence length: A100 non-causal
  151 -> 203 TFLOPS and causal 99 -> 189 TFLOPS from s = 512 to 16k [FA2] (M, as read in a review);
  H100: FA2 fwd+bwd reaches 335 TFLOPS at long s [FA2] (M), the short-s end scaled by A100's ratio (E).
- memory reserve (docs/hardware.md section 5): what a training process holds before the model, kept out of
  every plan's budget: CUDA context ~300 MB (pytorch#107667), cuBLAS workspace ~8.1 MiB [PT], NCCL buffers
  688 MB per communicator on A100 (nccl#964) and 4.34 GB for an 8x H100 all-to-all plus 288 MiB of NVLS
  buffers (nccl#1685, vllm#9699) on Hopper (M); the sum rounded up to a whole GiB, the rounding being the
  allowance for the allocator's slack (E): A100 1 GiB, H100 / H200 5 GiB. `reserve_fraction` (default 0)
  keeps a share of the memory back as well (Galvatron plans with 20% [GAL]).
- host link and host memory (docs/hardware.md section 7), what activation offload uses: PCIe Gen4 x16 on A100
  SXM, 64 GB/s both ways [DS-A], Gen5 x16 on H100 / H200 SXM, 128 GB/s both ways [DS-H]: 32 and 64 GB/s per
  direction (P); system memory DGX A100 1 TB (320 GB model) or 2 TB (640 GB model) [DGX-A], DGX H100 / H200
  2 TB [DGX-H] (P).
"""

from __future__ import annotations

from paradyse_lab.cluster.spec import GB, GIB, MIB, ClusterSpec

CUDA_CONTEXT_BYTES = 300_000_000
"""CUDA context per process with lazy module loading (pytorch/pytorch#107667; docs/hardware.md section 5)."""
CUBLAS_WORKSPACE_BYTES = int(8.1 * MIB)
"""cuBLAS workspace per handle and stream with the default config [PT]."""
NCCL_A100_BYTES = 688_000_000
"""NCCL buffers of one communicator over more than 2 GPUs, measured on 4x A100 (nccl#964)."""
NCCL_HOPPER_BYTES = 4_340_000_000 + 288 * MIB
"""An 8x H100 all-to-all's NCCL memory after its first call (nccl#1685) plus NVLS buffers (vllm#9699)."""


def sourced_reserve_bytes(nccl_bytes: int) -> int:
    """CUDA context + cuBLAS workspace + NCCL buffers, rounded up to a whole GiB (the rounding: the allocator's
    slack, module docstring)."""
    return -(-(CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + nccl_bytes) // GIB) * GIB


A100_CUBES = ((1024, 119.4 / 312), (2048, 221.8 / 312), (4096, 228.0 / 312), (8192, 253.7 / 312),
              (16384, 256.5 / 312))
A100_ATTN = ((512, 151 / 312), (16384, 203 / 312))
A100_ATTN_CAUSAL = ((512, 99 / 312), (16384, 189 / 312))
A100_SIZE_CURVE = ((1 * MIB, 36 / 230), (16 * MIB, 109 / 230), (256 * MIB, 214 / 230), (2048 * MIB, 1.0))
H100_SIZE_CURVE = ((1 * MIB, 44 / 472), (16 * MIB, 234 / 472), (256 * MIB, 423 / 472), (2048 * MIB, 1.0))
HOPPER_GEMM_SCALE = (794.5 / 989) / (271.2 / 312)
HOPPER_CUBES = tuple((d, e * HOPPER_GEMM_SCALE) for d, e in A100_CUBES)
H100_ATTN = ((512, 335 / 989 * 151 / 203), (16384, 335 / 989))
H100_ATTN_CAUSAL = ((512, 335 / 989 * 99 / 189), (16384, 335 / 989))
ALLTOALL_OVER_ALLGATHER = 336 / 370


def _bw(ag: float, p2p: float, all_reduce: float | None = None) -> dict:
    """Busbw table in B/s from GB/s figures (see the module docstring for the sources)."""
    return {
        "all_gather": ag * GB, "reduce_scatter": ag * GB, "all_reduce": (all_reduce or ag) * GB,
        "all_to_all": ag * ALLTOALL_OVER_ALLGATHER * GB, "p2p": p2p * GB, "broadcast": ag * GB,
    }


A100_HDR_NIC_BYTES_PER_S = 91e9 / 4
"""Per GPU over one HDR InfiniBand NIC (200 Gb/s = 25 GB/s line rate [NAD], P): nccl-tests measured an
all_reduce busbw of 91 GB/s between two HGX A100 nodes through 4 HDR NICs (tests#100, M), 22.75 GB/s per NIC
(E)."""
NDR_NIC_BYTES_PER_S = 47e9
"""Per GPU over one NDR ConnectX-7 NIC (400 Gb/s = 50 GB/s line rate [POD], P): NCCL reaches 46-48 GB/s per NDR
NIC (tests#290, tests#267, M); the middle, 47 GB/s."""
NODE_COUNTS = (1, 2, 4, 16)
"""Nodes of the multi-node presets (`a100-80gb-2x8`, `h100-80gb-16x8`, ...; 1 node: `a100-80gb-x8`). A
multi-node preset's hardware (`device`: its bundled profiles) is its one-node preset's."""


def _node_name(name: str, nodes: int) -> str:
    """`a100-80gb-x8` for one node, `a100-80gb-4x8` for four."""
    return name if nodes == 1 else name.replace("-x", f"-{nodes}x")


PCIE_GEN4_X16_BYTES_PER_S = 32e9
"""A100 SXM's host link, per direction: PCIe Gen4 x16, 64 GB/s both ways [DS-A] (P; docs/hardware.md section 7)."""
PCIE_GEN5_X16_BYTES_PER_S = 64e9
"""H100 / H200 SXM's host link, per direction: PCIe Gen5 x16, 128 GB/s both ways [DS-H] (P; section 7)."""
A100_PINNED_COPY_BYTES_PER_S = 25.1e9
"""What a pinned host <-> A100 SXM4 copy reaches per direction, 25.1 of the link's 32 GB/s [NVB-A] (M;
docs/hardware.md section 7): the A100 presets' `host_link_gbps` (activation offload moves its bytes so)."""
HOPPER_PINNED_COPY_BYTES_PER_S = 52.8e9
"""What a pinned host <-> H100 SXM copy reaches per direction, 52.8 of the link's 64 GB/s: the slower of the two
directions measured [NVB-H] (M; docs/hardware.md section 7): the Hopper presets' `host_link_gbps`."""
DGX_A100_320_HOST_BYTES = 1 * 2**40
"""DGX A100 (8x 40 GB) system memory: 1 TB [DGX-A] (P; section 7)."""
DGX_2TB_HOST_BYTES = 2 * 2**40
"""DGX A100 640 GB, DGX H100 and DGX H200 system memory: 2 TB [DGX-A] [DGX-H] (P; section 7)."""


def _a100(name: str, mem_mib: int, hbm: float, nodes: int = 1) -> ClusterSpec:
    return ClusterSpec(
        name=_node_name(name, nodes), gpus=8 * nodes, gpus_per_node=8,
        gpu_name=f"A100-SXM4-{'80' if mem_mib > 50000 else '40'}GB",
        memory_bytes=mem_mib * MIB, peak_flops=312e12, hbm_bytes_per_s=hbm,
        busbw_bytes_per_s=_bw(230, 195, 231.6), busbw_size_curve=A100_SIZE_CURVE,
        gemm_efficiency=A100_CUBES, attention_efficiency=A100_ATTN,
        attention_efficiency_causal=A100_ATTN_CAUSAL, reserve_bytes=sourced_reserve_bytes(NCCL_A100_BYTES),
        inter_node_bytes_per_s=A100_HDR_NIC_BYTES_PER_S, base="" if nodes == 1 else name,
        host_link_bytes_per_s=A100_PINNED_COPY_BYTES_PER_S,
        host_memory_bytes=DGX_2TB_HOST_BYTES if mem_mib > 50000 else DGX_A100_320_HOST_BYTES,
        source="docs/hardware.md: [DS-A] [DQ] [AZ] tests#149 [LP] [TUNE] [FA2]; reserve: section 5; "
        "host: section 7 [NVB-A]; between nodes: [NAD] tests#100",
    )


def _hopper(name: str, gpu: str, mem_mib: int, hbm: float, ag: float, p2p: float, nodes: int = 1) -> ClusterSpec:
    return ClusterSpec(
        name=_node_name(name, nodes), gpus=8 * nodes, gpus_per_node=8, gpu_name=gpu, memory_bytes=mem_mib * MIB,
        peak_flops=989e12, hbm_bytes_per_s=hbm, busbw_bytes_per_s=_bw(ag, p2p), busbw_size_curve=H100_SIZE_CURVE,
        gemm_efficiency=HOPPER_CUBES, attention_efficiency=H100_ATTN,
        attention_efficiency_causal=H100_ATTN_CAUSAL, reserve_bytes=sourced_reserve_bytes(NCCL_HOPPER_BYTES),
        inter_node_bytes_per_s=NDR_NIC_BYTES_PER_S, base="" if nodes == 1 else name,
        host_link_bytes_per_s=HOPPER_PINNED_COPY_BYTES_PER_S, host_memory_bytes=DGX_2TB_HOST_BYTES,
        source="docs/hardware.md: [DS-H] [MLE-A] [MLE-N] [AZ] tests#212 nccl#2169 nccl#1264 [TUNE] [FA2]; "
        "memory: nvidia-smi (M); reserve: section 5; host: section 7 [NVB-H]; "
        "between nodes: [POD] tests#290 tests#267",
    )


PRESETS: dict[str, ClusterSpec] = {
    c.name: c
    for c in (
        *(_a100("a100-80gb-x8", 81251, 2039e9, n) for n in NODE_COUNTS),
        _a100("a100-40gb-x8", 40441, 1555e9),
        *(_hopper("h100-80gb-x8", "H100-SXM5-80GB", 81559, 3.35e12, 370, 371, n) for n in NODE_COUNTS),
        _hopper("h200-x8", "H200-SXM", 143771, 4.8e12, 365, 396),
    )
}
DEFAULT_CLUSTER = "a100-80gb-x8"
