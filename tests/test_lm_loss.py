"""The chunked language-model loss equals the plain one, and the process keeps freed memory mapped."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from spanviz.lm_loss import chunk_rows, lm_cross_entropy
from spanviz.model import GPTConfig, TinyGPT


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("N", "V", "d", "rows"), [(100, 50, 8, 16), (37, 1000, 16, 5), (64, 300, 8, None)])
def test_chunked_loss_and_gradients_equal_the_plain_loss(dtype, N, V, d, rows):
    g = torch.Generator().manual_seed(N)
    h = torch.randn(N, d, generator=g, dtype=dtype, requires_grad=True)
    W = torch.randn(V, d, generator=g, dtype=dtype, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)
    plain = F.cross_entropy(h @ W.T, y)
    chunked = lm_cross_entropy(h, W, y, rows)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(chunked, plain, **tol)
    for a, b in zip(torch.autograd.grad(3 * chunked, (h, W)), torch.autograd.grad(3 * plain, (h, W))):
        torch.testing.assert_close(a, b, **tol)
    with torch.no_grad():  # evaluation: the loss alone, chunk by chunk
        torch.testing.assert_close(lm_cross_entropy(h, W, y, rows), plain, **tol)


def test_model_loss_without_logits_equals_the_plain_loss():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=300, context_length=16, n_layer=1, n_head=2, d_model=16))
    x = torch.randint(0, 300, (4, 16))
    y = torch.roll(x, -1, 1)
    logits, plain = model(x, y)
    grads = torch.autograd.grad(plain, list(model.parameters()))
    none, chunked = model(x, y, return_logits=False)
    assert none is None and logits.shape == (4, 16, 300)
    torch.testing.assert_close(chunked, plain)
    for a, b in zip(torch.autograd.grad(chunked, list(model.parameters())), grads):
        torch.testing.assert_close(a, b)


def test_chunk_rows_and_bad_shapes():
    assert chunk_rows(8192) == 256 and chunk_rows(10**9) == 16
    with pytest.raises(ValueError, match="targets"):
        lm_cross_entropy(torch.zeros(4, 3), torch.zeros(5, 3), torch.zeros(3, dtype=torch.long))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_training_steps_in_a_fresh_process_do_not_page_fault():
    """What a fresh notebook kernel pays per step: before the chunked loss and the malloc settings, about 10⁵
    minor page faults per step at the notebook size (every large buffer handed back to the system and faulted
    in again). A fresh process, a smaller model with the same logits-sized traffic, 1 torch thread."""
    code = textwrap.dedent("""
        import resource, torch
        from types import SimpleNamespace
        from spanviz.model import GPTConfig
        from spanviz.train import TrainConfig, Trainer
        torch.set_num_threads(1)
        ids = torch.randint(0, 8192, (50_000,), generator=torch.Generator().manual_seed(0))
        data = SimpleNamespace(train_ids=ids, eval_ids=ids[:5000], vocab_size=8192, describe=lambda: {})
        cfg = GPTConfig(vocab_size=8192, context_length=128, n_layer=1, n_head=2, d_model=32)
        trainer = Trainer(cfg, TrainConfig(steps=20, batch_size=16, eval_interval=10**6, device="cpu"), data)
        trainer.step(4)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        trainer.step(8)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 8)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    faults_per_step = float(out.stdout.strip().splitlines()[-1])
    assert faults_per_step < 2000, faults_per_step  # before: 73 k (16 × 128 × 8192 × 4 bytes = 16 k pages a buffer)
