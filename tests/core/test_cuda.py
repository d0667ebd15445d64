"""The CUDA paths (skipped without a GPU; run on one with ``pytest tests/test_cuda.py``): every sequence mechanism
computes on the GPU what it computes on the CPU (outputs and gradients, padded, each mode, float64 so that the
comparison is exact up to summation order), its fast path equals its reference there, causal mechanisms decode
step by step on the GPU as they compute the whole sequence, and a Hugging Face Llama with a mechanism swapped in
decodes with its cache on the GPU as it recomputes."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build, lengths_mask, mixer_cases
from torch import nn

import tokenmix

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CAUSAL_QKV = ["softmax", "linear", "performer", "cosformer", "kerformer", "sparse_strided", "sparse_fixed"]


def _outputs_and_grads(mixer: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, cotangent: torch.Tensor,
                       reference: bool = False) -> list[torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    out = (mixer.forward_reference if reference else mixer)(x, mask)
    grads = torch.autograd.grad((out * cotangent).sum(), [x, *mixer.parameters()], allow_unused=True)
    return [out, *(g if g is not None else torch.zeros(()) for g in grads)]


@pytest.mark.parametrize("name,causal", mixer_cases())
def test_the_gpu_computes_what_the_cpu_computes(name, causal):
    torch.manual_seed(0)
    cpu = build(name, causal=causal).train(False)
    gpu = copy.deepcopy(cpu).cuda()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 20, 16, generator=g, dtype=torch.float64)
    mask = lengths_mask([20, 13, 7], 20) if tokenmix.mixer_info(name).padding else None
    cotangent = torch.randn(3, 20, 16, generator=g, dtype=torch.float64)
    on_cpu = _outputs_and_grads(cpu, x, mask, cotangent)
    on_gpu = _outputs_and_grads(gpu, x.cuda(), None if mask is None else mask.cuda(), cotangent.cuda())
    for a, b in zip(on_cpu, on_gpu):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-9)
    if hasattr(gpu, "forward_reference"):
        reference = _outputs_and_grads(gpu, x.cuda(), None if mask is None else mask.cuda(), cotangent.cuda(),
                                       reference=True)
        for a, b in zip(on_gpu, reference):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", CAUSAL_QKV)
def test_step_decoding_on_the_gpu_gives_the_whole_sequence_forward(name):
    from test_decoding import LENGTH, VOCAB, _model

    model = _model(name).cuda()
    ids = torch.randint(0, VOCAB, (3, LENGTH), device="cuda")
    with torch.no_grad():
        full = model(ids)
        with tokenmix.decoding(model):
            steps = [model(ids[:, :5])] + [model(ids[:, t:t + 1], start=t) for t in range(5, LENGTH)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["linear", "kerformer", "performer"])
def test_a_hugging_face_llama_decodes_with_its_cache_on_the_gpu(name):
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("the [hf] extra needs transformers >= 5")
    from test_hf_models import VOCAB, _model

    model = _model("llama").eval().cuda()
    tokenmix.replace_attention(model, name)
    ids = torch.randint(2, VOCAB, (2, 10), device="cuda")
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :6], use_cache=True)
        cache, steps = out.past_key_values, [out.logits]
        for i in range(6, 10):
            out = model(ids[:, i:i + 1], past_key_values=cache, use_cache=True)
            cache, steps = out.past_key_values, steps + [out.logits]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
