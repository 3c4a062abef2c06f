"""spanviz.modes.eval_mode: eval inside the block, the previous mode restored after (also on error)."""

import pytest
import torch

from spanviz.modes import eval_mode


@pytest.mark.parametrize("start_training", [True, False])
def test_eval_mode_restores_the_previous_mode(start_training):
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    module.train(start_training)
    with eval_mode(module) as inside:
        assert inside is module
        assert not module.training and not module[1].training
    assert module.training is start_training and module[1].training is start_training


def test_eval_mode_restores_after_an_error():
    module = torch.nn.Dropout(0.5).train()
    with pytest.raises(KeyError), eval_mode(module):
        raise KeyError("inside")
    assert module.training
