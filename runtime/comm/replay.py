"""Replay every rank's recorded communication through a one-stream-per-rank matcher: deadlock or mismatch.

Library module (no command; tests/runtime/test_comm_replay.py runs it). `record_ranks(run, p)` runs
`run(group)` once per rank r of a p-rank world with a `paradyse_lab.runtime.comm.fake_group.FakeGroup(p, r)` inside
`comm_record.trace_calls()`: no process is started and nothing is sent, but each rank's control flow depends only on
its rank, so the recorded sequence is exactly the calls that rank posts in a real run. `replay(traces)`
then executes the sequences the way NCCL does (one stream per rank, calls in posting order):
- a collective completes when it is at the head of every rank's stream; heads that differ in op, shape or
  dtype are a mismatch (NCCL would hang or return garbage);
- a point-to-point exchange (one `batch_isend_irecv`: its sends and receives as one group) completes when
  every one of its messages meets the matching message at the head of the peer's stream: the k-th send from
  a to b pairs with b's k-th receive from a in that head; a pair with different shape, dtype or message tag
  is a mismatch (NCCL has no tags: equal-sized messages of different meaning would pair silently and
  deliver, say, a dK/dV accumulator where a K/V block was expected);
- when no head can complete and some stream is not empty, the ranks are deadlocked.
Exchanges are blocking rendezvous in this model (NCCL's behaviour for messages above its eager threshold),
so an order that only works with buffering is reported too.
"""

from __future__ import annotations

from collections import Counter, defaultdict


class ReplayError(AssertionError):
    """The recorded calls would deadlock or mismatch on NCCL."""


def record_ranks(run, p: int) -> list[list]:
    """Each rank's `comm_record.TracedCall`s of `run(group)`, played with FakeGroup(p, rank) for rank = 0..p-1."""
    from paradyse_lab.runtime.comm import record as comm_record
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    traces = []
    for rank in range(p):
        with comm_record.trace_calls() as calls:
            run(FakeGroup(p, rank))
        traces.append(list(calls))
    return traces


def _describe(rank: int, call) -> str:
    if call is None:
        return f"rank {rank}: finished"
    if call.op == "p2p":
        parts = [f"send {shape} {dt} tag {tag} to {dst}" for dst, shape, dt, tag in call.sends]
        parts += [f"recv {shape} {dt} tag {tag} from {src}" for src, shape, dt, tag in call.recvs]
        return f"rank {rank}: p2p[{', '.join(parts)}] ({call.tag or 'untagged'})"
    return f"rank {rank}: {call.op} {call.shape} {call.dtype} ({call.tag or 'untagged'})"


def _pairs_ready(rank: int, heads: list, ready: set[int]) -> bool:
    """Whether every message of `rank`'s head exchange meets its counterpart in a ready peer's head
    (raises ReplayError on a pair whose shape or dtype differ)."""
    call = heads[rank]
    for mine, theirs, direction in ((call.sends, "recvs", "send"), (call.recvs, "sends", "recv")):
        by_peer = defaultdict(list)
        for peer, *message in mine:
            by_peer[peer].append(tuple(message))
        for peer, msgs in by_peer.items():
            if peer not in ready:
                return False
            other = [tuple(message) for q, *message in getattr(heads[peer], theirs) if q == rank]
            if len(other) != len(msgs):
                return False
            for k, (a, b) in enumerate(zip(msgs, other)):
                if a != b:
                    raise ReplayError(f"mismatch: message {k} of rank {rank}'s {direction} with rank {peer}: "
                                      f"{a} vs {b}\n  {_describe(rank, call)}\n  {_describe(peer, heads[peer])}")
    return True


def replay(traces: list[list]) -> int:
    """Run the per-rank call sequences through the matcher (module docstring); returns the number of rounds.
    Raises ReplayError naming every rank's pending call on a deadlock or a mismatch."""
    p = len(traces)
    pos = [0] * p
    rounds = 0
    while any(pos[r] < len(traces[r]) for r in range(p)):
        heads = [traces[r][pos[r]] if pos[r] < len(traces[r]) else None for r in range(p)]
        ready = {r for r in range(p) if heads[r] is not None and heads[r].op == "p2p"}
        changed = True
        while changed:  # the largest set of head exchanges whose messages all meet inside the set
            changed = False
            for r in sorted(ready):
                if r in ready and not _pairs_ready(r, heads, ready):
                    ready.discard(r)
                    changed = True
        if ready:
            for r in ready:
                pos[r] += 1
        elif all(h is not None and h.op != "p2p" for h in heads):
            kinds = Counter((h.op, h.shape, h.dtype, h.group_size) for h in heads)
            if len(kinds) > 1:
                raise ReplayError("mismatch: ranks post different collectives\n  " +
                                  "\n  ".join(_describe(r, h) for r, h in enumerate(heads)))
            pos = [x + 1 for x in pos]
        else:
            raise ReplayError(f"deadlock after {rounds} rounds: no pending call can complete\n  " +
                              "\n  ".join(_describe(r, h) for r, h in enumerate(heads)))
        rounds += 1
    return rounds
