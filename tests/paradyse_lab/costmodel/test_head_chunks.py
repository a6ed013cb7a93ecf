"""Head-chunked attention (`+headchunk`) in the catalog and the cost model: where it is offered, what it keeps and
sends (the runtime's bytes against these counts: tests/runtime/head_chunk_cases.py)."""

from __future__ import annotations

import pytest

from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import CATALOG, USABLE, StrategyOption, options
from paradyse_lab.costmodel.head_chunks import HEAD_CHUNK_SCHEDULES, head_chunk_count
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.strategies.head_chunked import HEAD_CHUNKED_ATTENTION

LLAMA = PRESETS["llama3-8b"]  # 32 heads, 8 K/V heads of 128


def test_every_strategy_that_offers_it_has_a_schedule_and_a_runtime_and_the_others_say_why():
    offered = [n for n in USABLE if CATALOG[n].head_chunks == "yes"]
    assert offered == ["ulysses_z"]
    for name in offered:
        assert CATALOG[name].schedule in HEAD_CHUNK_SCHEDULES and name in HEAD_CHUNKED_ATTENTION
    for name in set(USABLE) - set(offered):
        with pytest.raises(UserInputError, match=f"{name}\\+headchunk: .+; \\+headchunk is offered by ulysses_z"):
            StrategyOption.parse(f"{name}+headchunk")


def test_the_flag_reads_and_writes_in_its_place_and_acts_on_attention_only():
    opt = StrategyOption.parse("ulysses_z+recompute+tiled+headchunk+offload")
    assert (opt.recompute, opt.tiled, opt.headchunk, opt.offload) == (True, True, True, True)
    assert opt.name == "ulysses_z+recompute+tiled+headchunk+offload"
    with pytest.raises(UserInputError):
        StrategyOption.parse("ulysses_z+offload+headchunk")  # out of order
    chunked = StrategyOption.parse("ulysses_z+headchunk")
    assert chunked.runs(("attention",)) and chunked.runs(("attention", "mlp")) and not chunked.runs(("mlp",))
    names = [o.name for o in options(recompute=True, headchunk=True)]
    assert [n for n in names if "headchunk" in n] == ["ulysses_z+headchunk", "ulysses_z+recompute+headchunk"]


def test_it_keeps_the_sequence_layout_set_once_and_sends_one_all_to_all_pair_per_chunk():
    seq, p = 65536, 8
    t, h, e = seq // p, LLAMA.hidden, LLAMA.dtype_bytes
    plain = schedule(LLAMA, "attention", StrategyOption("ulysses_z"), seq, 1, p)
    chunked = schedule(LLAMA, "attention", StrategyOption("ulysses_z", headchunk=True), seq, 1, p)
    korthikanti = t * (4 * h + 2 * LLAMA.kv_hidden) * e + 4 * LLAMA.heads * t  # x, u, q, k, v, o and the fp32 lse
    assert chunked.kept_bytes == korthikanti == plain.kept_bytes - t * h * e  # no second copy of the output
    c = head_chunk_count(LLAMA.heads, p)
    assert c == 4
    a2a = [x for x in chunked.collectives if x.op == "all_to_all"]
    assert [x.count for x in a2a] == [c] * 4
    # one query head per rank and the K/V head it reads: K and V travel once per query head (GQA)
    assert sum(x.buffer_bytes * x.count for x in a2a) == t * e * (3 + 1 + 5 + 3) * h
    assert chunked.transient_bytes < plain.transient_bytes
    assert chunked.attention_flops == plain.attention_flops and chunked.gemm_flops == plain.gemm_flops
    recomputed = schedule(LLAMA, "attention", StrategyOption("ulysses_z", recompute=True, headchunk=True), seq, 1, p)
    assert recomputed.kept_bytes == t * h * e
    assert recomputed.transient_bytes < schedule(LLAMA, "attention", StrategyOption("ulysses_z", recompute=True),
                                                 seq, 1, p).transient_bytes


def test_an_mlp_ignores_it():
    plain = schedule(LLAMA, "mlp", StrategyOption("ulysses_z"), 8192, 1, 8)
    assert schedule(LLAMA, "mlp", StrategyOption("ulysses_z", headchunk=True), 8192, 1, 8) == plain
