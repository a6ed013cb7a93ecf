"""Point-to-point exchanges of the runtime (ring steps, chained broadcasts and reductions), with the process
group as an argument.

Library module (no command). Works on gloo (CPU) and NCCL (GPU), and with a
`paradyse_lab.runtime.comm.fake_group.FakeGroup`
(shapes exact, nothing sent) as the counted collectives do; every exchange records the bytes this rank
sends and the exchange itself. Ranks are group ranks, turned into global ones here.

Gloo notes: point-to-point exchanges are plain paired `isend`/`irecv` (batched point-to-point can hang on
gloo); on NCCL an exchange is one `batch_isend_irecv` so that a send and a receive to the same peer cannot
deadlock. Point-to-point messages between a pair of ranks are matched in the order they are posted, so every
caller must post them in the same program order on all ranks (the strategies do).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import record as comm_record


class Pending:
    """An exchange in flight: `wait()` returns the received tensor (or None when nothing is received)."""

    def __init__(self, works, recv: torch.Tensor | None):
        self._works, self._recv = works, recv

    def wait(self) -> torch.Tensor | None:
        for w in self._works:
            w.wait()
        self._works = []
        return self._recv


def exchange(send: torch.Tensor | None, dst: int | None, src: int | None, recv_like: torch.Tensor | None = None,
             group=None, tag: int = 0) -> Pending:
    """Start sending `send` to group rank `dst` and receiving a tensor shaped like `recv_like` (or `send`)
    from group rank `src`; either side may be None. Double-buffered callers start the next exchange
    before computing on the current block and `wait()` after."""
    works = []
    recv = None
    if src is not None:
        like = recv_like if recv_like is not None else send
        recv = torch.empty_like(like, memory_format=torch.contiguous_format)
    if send is not None:
        send = send.contiguous()
        comm_record.record_sent_bytes("p2p", comm_record.tensor_bytes(send))
    if (send is not None or recv is not None) and comm_record.tracing():  # the group's size only when traced
        comm_record.record_call(
            "p2p", comm.size(group),
            sends=[(dst, tuple(send.shape), comm_record.dtype_name(send), tag)] if send is not None else [],
            recvs=[(src, tuple(recv.shape), comm_record.dtype_name(recv), tag)] if recv is not None else [])
    if comm.is_fake_group(group):  # nothing sent: the "received" tensor is a copy of what would be sent
        if recv is not None:
            recv.copy_(send if send is not None and send.shape == recv.shape else like)
    elif comm.is_nccl(group, send if send is not None else recv):
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send, comm.global_rank(group, dst), group))  # [..] to dst
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, comm.global_rank(group, src), group))  # [..] from src
        works = dist.batch_isend_irecv(ops) if ops else []
    else:  # gloo: plain paired isend / irecv
        if send is not None:
            works.append(dist.isend(send, comm.global_rank(group, dst), group=group, tag=tag))  # [..] to dst
        if recv is not None:
            works.append(dist.irecv(recv, comm.global_rank(group, src), group=group, tag=tag))  # [..] from src
    return Pending(works, recv)


def ring_exchange(send: torch.Tensor, group=None, tag: int = 0) -> Pending:
    """Send `send` to the next rank (r+1) and receive the previous rank's (r-1) tensor of the same shape."""
    p, r = comm.size(group), comm.rank(group)
    return exchange(send, (r + 1) % p, (r - 1) % p, group=group, tag=tag)


def chain_broadcast(x: torch.Tensor | None, like: torch.Tensor, root: int, group=None, tag: int = 0):
    """Pipelined broadcast from `root` along the ring root -> root+1 -> ... -> root-1 by point-to-point
    messages: every rank but the last in the chain sends the tensor once. Returns (tensor, pending sends)."""
    p, r = comm.size(group), comm.rank(group)
    pos = (r - root) % p
    value = x if pos == 0 else exchange(None, None, (r - 1) % p, recv_like=like, group=group, tag=tag).wait()
    send = exchange(value, (r + 1) % p, None, group=group, tag=tag) if pos < p - 1 else None
    return value, send


def chain_reduce(x: torch.Tensor, root: int, group=None, tag: int = 0):
    """Sum `x` over ranks onto `root` along the chain root+1 -> root+2 -> ... -> root by point-to-point
    messages (every rank but the root sends once). Returns (the sum on the root, else None; pending send)."""
    p, r = comm.size(group), comm.rank(group)
    pos = (r - root) % p
    if pos == 1 or (p == 1):
        acc = x
    else:
        acc = x + exchange(None, None, (r - 1) % p, recv_like=x, group=group, tag=tag).wait()
    if pos == 0:
        return acc, None
    return None, exchange(acc, (r + 1) % p, None, group=group, tag=tag)
