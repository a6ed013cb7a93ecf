"""The learning-rate factors of each schedule, the accumulation weights, and their option checks."""

import math

import pytest

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.training.optim_schedule import check_optimisation_options, lr_factor, micro_weights


def test_warmup_then_each_schedule():
    assert [lr_factor("constant", i, 2, 6) for i in range(6)] == [1 / 3, 2 / 3, 1, 1, 1, 1]
    assert [lr_factor("linear", i, 2, 6) for i in range(6)] == [1 / 3, 2 / 3, 1, 0.75, 0.5, 0.25]
    cosine = [lr_factor("cosine", i, 0, 4) for i in range(4)]
    assert cosine == pytest.approx([1, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2])


def test_micro_weights_are_shares_of_the_targets():
    assert micro_weights([30, 10]) == [0.75, 0.25] and micro_weights([0, 0]) == [0.5, 0.5]


@pytest.mark.parametrize("change, match", [({"lr_schedule": "step"}, "--lr-schedule"),
                                           ({"accumulate": 0}, "--accumulate must be an integer >= 1"),
                                           ({"clip_grad": -1.0}, "--clip-grad"),
                                           ({"eval_every": 5}, "--eval-dataset and --eval-every go together"),
                                           ({"data_order": "shuffled"}, "--data-order applies to token files")])
def test_bad_options_are_refused(change, match):
    with pytest.raises(UserInputError, match=match):
        check_optimisation_options(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", **change))
