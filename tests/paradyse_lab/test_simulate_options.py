"""paradyse_lab/cli/simulate_options.py: one tree of options for simulate, experiment and reproduce, composed
from dataclasses (paradyse_lab/options.py)."""

import pytest

from paradyse_lab.cli import build_parser
from paradyse_lab.cli.simulate_options import ExperimentOptions, ReproduceOptions, SimulateOptions
from paradyse_lab.errors import UserInputError
from paradyse_lab.options import from_namespace


def test_simulate_options_are_composed_and_give_the_setup():
    args = build_parser().parse_args(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:dp",
                                      "--reserve-gb", "2", "--pack-tokens", "32768", "--no-smoothing",
                                      "--cost-model", "paper"])
    opts = from_namespace(SimulateOptions, args)
    assert (opts.run.reserve_gb, opts.run.truth_cost_model, opts.smoothing) == (2.0, "paper", False)
    setup = opts.run.setup(opts.packing)
    assert (setup.reserve_bytes, setup.pack_tokens, setup.truth, setup.size) == (2 * 2**30, 32768, "paper", 200)


def test_experiment_and_reproduce_read_the_same_tree():
    args = build_parser().parse_args(["experiment", "table5", "--size", "7", "--no-exact", "--recompute"])
    opts = from_namespace(ExperimentOptions, args)
    assert (opts.name, opts.exact, opts.run.size, opts.run.recompute) == ("table5", False, 7, True)
    opts = from_namespace(ReproduceOptions, build_parser().parse_args(["reproduce", "--quick"]))
    assert opts == ReproduceOptions(quick=True)


@pytest.mark.parametrize("flags, match", [(["--gamma", "1"], "--gamma"), (["--reserve-gb", "-1"], "--reserve-gb"),
                                          (["--granularity", "x"], "--granularity"), (["--size", "0"], "--size")])
def test_bad_values_are_one_line_errors(flags, match):
    args = build_parser().parse_args(["experiment", "fig2", *flags])
    with pytest.raises(UserInputError, match=match):
        from_namespace(ExperimentOptions, args).run.setup()
