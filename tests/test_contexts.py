"""spanviz.contexts.eval_mode and torch_threads: set inside the block, the previous setting restored after (also on error)."""

import pytest
import torch

from spanviz.contexts import eval_mode, torch_threads


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


@pytest.mark.parametrize("threads", [1, None])
def test_torch_threads_restores_the_thread_count_also_after_an_error(threads):
    before = torch.get_num_threads()
    with pytest.raises(KeyError), torch_threads(threads):
        assert torch.get_num_threads() == (1 if threads == 1 else before)
        raise KeyError("inside")
    assert torch.get_num_threads() == before
