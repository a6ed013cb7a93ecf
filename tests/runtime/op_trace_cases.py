"""Distributed cases of the operation tracer (runtime/trace/op_trace.py): on a real gloo group, each rank runs one
sub-layer's forward and backward under every option of a strategy with the dispatch recorder open, and the
operations it dispatched (every aten operator; attention calls and collectives at the runtime's entry points)
equal, one for one in order, the trace of the same rank made on meta tensors through a fake process group.

Run in the distributed tests' one gloo world per size (runtime_cases.py registers them) at p = 1, 2 and 3
(`ONLY_AT`): p = 1 is the path without communication, p = 3 the odd ring and ranks whose zig-zag positions differ
(rank 0's causal blocks are not the others'), p = 2 the ring whose previous and next rank are one. p = 4 adds no
path of its own to a one-dimensional strategy (a longer loop over the same steps); there the two-dimensional
strategies' ops-traced cases (tpcp-, usp-, uneven-ops-traced) trace their rings and all-to-alls over all four ranks
(degrees 1 x 4 and 4 x 1). Every strategy's plain option
runs at each of these sizes; each flag at one world of several ranks (`FLAGS_AT`): a flag wraps the strategy's
collectives and the code between them alike at every p (a recomputed forward repeats them), so where its trace
and run agree at one world they agree at the others, and each rank of a world costs its (option, sub-layer) pairs a
real run and a meta trace (the meta trace most: meta kernels run through torch's Python references).
`+offload` is in (alone: it moves every saved storage, where `+recompute+offload` moves the input only): the
offloader tells storages apart by the storage itself, not its address (every meta storage has address 0), so a
traced step keeps one host copy per storage as a real run does.
"""

from __future__ import annotations

import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.trace.op_trace import run_sublayer_step, sublayer_inputs, trace_sublayer, warm_trace

CFG = ModelSpec(vocab_size=128, max_positions=64, hidden=96, heads=12, layers=2, causal=True, name="runtime")
"""12 heads and a 48-position sequence: every strategy splits it at p = 1, 2, 3 and 4."""
S = 48
FLAGS_AT = {1: ("",), 2: ("", "+recompute", "+tiled", "+offload"), 3: ("",)}
"""The options' flags each world size traces and runs: every flag at one world of several ranks, where it costs
least, p = 2 (a flag wraps the strategy's code alike at p = 1, where every strategy's plain option runs the path
without communication): +recompute (it repeats a forward's exchanges, a ring's as the all-to-alls, the same
at every ring length: p = 3's odd ring runs the plain options, whose forward is the one repeated), +tiled (an MLP's
chunks) and +offload (the saved tensors' hooks, alike at every p); p = 4, the costliest world, traces the
two-dimensional strategies alone (tpcp- and usp-ops-traced, with +recompute and +offload).
`+recompute+tiled` is not among them: on an MLP alone it is `+tiled`, and `+tiled` acts on no attention
(`StrategyOption.runs`: neither is a sub-layer decision of its own)."""
KINDS = ("attention", "mlp")


def mismatches(strategy: str, rank: int, p: int, group) -> list[str]:
    """The (option, kind) pairs whose real run dispatched other operations than the meta trace shows."""
    out = []
    if get_strategy(strategy).violation(CFG.with_dtype("fp32"), p, S):
        return out
    for flags in FLAGS_AT[p]:
        option = StrategyOption.parse(strategy + flags)
        for kind in KINDS:
            if not option.runs((kind,)):
                continue  # the same sub-layer as an option already checked (+tiled on an attention, ...)
            traced = trace_sublayer(CFG, kind, option, S, p, dtype="fp32", rank=rank)
            params, x = sublayer_inputs(CFG, kind, S, p, 1, torch.float32, "cpu", rank)
            ran = warm_trace(lambda option=option, kind=kind, params=params, x=x:
                             run_sublayer_step(CFG, kind, option, S, group, params, x))
            if ran != traced:
                first = next((i for i, (a, b) in enumerate(zip(ran, traced)) if a != b), min(len(ran), len(traced)))
                out.append(f"{option.name} {kind}: ran {len(ran)} ops, traced {len(traced)}; first difference at "
                           f"{first}: {ran[first] if first < len(ran) else None} vs "
                           f"{traced[first] if first < len(traced) else None}")
    return out


def case_of(strategy: str):
    def case(rank: int, p: int, group) -> None:
        bad = mismatches(strategy, rank, p, group)
        assert not bad, "\n".join(bad)
    return case


CASES = {f"op-trace-{name}": case_of(name) for name in STRATEGY_MODULES}
"""Named apart from the operator-count cases (`ops-*`, their own worlds)."""
ONLY_AT = {name: tuple(FLAGS_AT) for name in CASES}
"""Each rank traces and runs its (option, sub-layer) pairs at p = 1 without communication, 3 the one odd world (an
odd ring length, zig-zag over an odd p), 2 the even one; the flags of each world: `FLAGS_AT`."""
