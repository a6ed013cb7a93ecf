import pytest

from paradyse_lab.core.model_spec import PRESETS, ModelSpec
from paradyse_lab.core.strategies import CATALOG, USABLE, Strategy, StrategyOption, get_strategy, options
from paradyse_lab.errors import UserInputError


def test_catalog():
    assert USABLE == ("megatron_ts", "megatron_cz", "ulysses_z", "metp")
    colossal = CATALOG["colossal_z"]
    assert not colossal.usable and "FlashAttention" in colossal.unusable_reason
    assert "quadratic" in colossal.unusable_reason


def test_runtime_module_lives_in_runtime():
    """A catalog entry cannot point the runtime at a module outside runtime/ (say a solver's)."""
    with pytest.raises(ValueError, match="runtime_module 'solvers.metp' is not a module of runtime/"):
        Strategy("x", "X", "a", "m", False, False, abbreviation="XX", color="#000000", schedule="metp",
                 runtime_module="solvers.metp")
    assert all(s.runtime_module.startswith("paradyse_lab.runtime.") for s in CATALOG.values() if s.usable)


def test_option_names_round_trip():
    assert StrategyOption.parse("metp+recompute") == StrategyOption("metp", True)
    assert StrategyOption("ulysses_z").name == "ulysses_z"
    assert [o.name for o in options(("metp",), recompute=True)] == ["metp", "metp+recompute"]
    with pytest.raises(UserInputError, match="valid: .*megatron_ts"):
        StrategyOption.parse("zero3")


def test_ulysses_needs_heads_and_kv_heads_divisible():
    llama3 = PRESETS["llama3-8b"]  # 32 heads, 8 KV heads
    uly = get_strategy("ulysses_z")
    assert uly.violation(llama3, 8, 4096) is None
    assert uly.violation(llama3, 16, 4096) is None  # 8 K/V heads replicated twice
    assert uly.violation(llama3, 32, 4096) is None  # replicated 4 times
    assert "heads (12)" in uly.violation(PRESETS["gpt2"], 8, 4096)
    assert get_strategy("megatron_cz").violation(PRESETS["gpt2"], 8, 4096) is None


def test_the_gqa_rule_per_strategy():
    """Ring: any kv_heads; Ulysses: kv_heads % p == 0 or p % kv_heads == 0; TS and METP: kv_heads % p == 0;
    every strategy: kv_heads * head_dim % p == 0 (the 1/p weight shard of K and V)."""
    def spec(kv, heads=12, d=12):
        return ModelSpec(name="x", hidden=heads * d, heads=heads, kv_heads=kv, layers=1, ffn_hidden=96, vocab_size=8)

    def feasible(model, p):
        return {n for n in USABLE if get_strategy(n).violation(model, p, 48) is None}

    assert feasible(spec(12), 4) == {"megatron_ts", "megatron_cz", "ulysses_z", "metp"}
    assert feasible(spec(2), 4) == {"megatron_cz", "ulysses_z"}  # Ulysses replicates each K/V head twice
    assert feasible(spec(1), 3) == {"megatron_cz", "ulysses_z"}
    assert feasible(spec(2), 3) == {"megatron_cz"}  # 3 % 2 and 2 % 3: no whole number of copies
    assert feasible(spec(4), 2) == {"megatron_ts", "megatron_cz", "ulysses_z", "metp"}
    assert "kv_heads (2) must be divisible by p (4): the tensor-parallel head split" in (
        get_strategy("megatron_ts").violation(spec(2), 4, 48))
    assert "kv_heads * head_dim (6) must be divisible by p (4)" in get_strategy("megatron_cz").violation(
        spec(1, d=6), 4, 48)


def test_sequence_unit_is_2p_for_causal_rings_and_p_otherwise():
    gpt, bert = PRESETS["gpt"], PRESETS["bert"]
    cz = get_strategy("megatron_cz")
    assert "divisible by 16" in cz.violation(gpt, 8, 8 * 3)
    assert cz.violation(bert, 8, 8 * 3) is None  # non-causal: contiguous chunks
    assert get_strategy("megatron_ts").violation(gpt, 8, 8 * 3) is None
    with pytest.raises(UserInputError, match="megatron_ts: sequence length 100 must be divisible by 8"):
        get_strategy("megatron_ts").check(gpt, 8, 100)


def test_colossal_is_never_feasible():
    assert "not usable" in get_strategy("colossal_z").violation(PRESETS["gpt"], 8, 4096)


def test_the_head_rules_bind_attention_sub_layers_only():
    """One K/V head on 4 GPUs: megatron_ts and metp cannot split the attention's heads, but an MLP has no
    heads, so a plan may run them on the MLP sub-layers; the cost model prices those sub-layers and refuses
    the attention ones (and the whole layer) with the catalog's sentence."""
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.costmodel.analytic import AnalyticCostModel

    model = ModelSpec(name="x", hidden=96, heads=8, kv_heads=1, layers=2, ffn_hidden=192, vocab_size=8,
                      ffn_kind="swiglu", norm="rmsnorm", bias=False)
    cm = AnalyticCostModel(model, get_cluster("a100-80gb-x8"), p=4)
    for name in ("megatron_ts", "metp"):
        strategy = get_strategy(name)
        assert strategy.violation(model, 4, 64, "mlp") is None
        assert "kv_heads (1) must be divisible by p (4)" in strategy.violation(model, 4, 64, "attention")
        assert strategy.violation(model, 4, 64) == strategy.violation(model, 4, 64, "attention")
        assert cm.feasible(StrategyOption(name), 64, "mlp") and not cm.feasible(StrategyOption(name), 64)
        assert cm.sublayer("mlp", StrategyOption(name, recompute=True), 64).time_s > 0
        with pytest.raises(UserInputError, match=r"kv_heads \(1\)"):
            cm.sublayer("attention", StrategyOption(name), 64)
    wide = ModelSpec(name="y", hidden=96, heads=8, layers=1, ffn_hidden=90, vocab_size=8)
    assert get_strategy("megatron_ts").violation(wide, 4, 64, "attention") is None  # f = 90 binds the MLP only
    assert "ffn_hidden (90)" in get_strategy("megatron_ts").violation(wide, 4, 64, "mlp")
