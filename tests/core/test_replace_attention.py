"""tokenmix.replace_attention: any sequence mechanism in place of nn.MultiheadAttention in a PyTorch model."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tokenmix
from tokenmix.mixers.heads import QKVMixer
from tokenmix.models.replace import MixerAttention
from tokenmix.registry import list_mixers, mixer_info

DIM, HEADS, N = 16, 4, 10


def _sequence_mixers() -> list[str]:
    return [n for n in list_mixers() if not mixer_info(n).spatial and not mixer_info(n).residual]


def _encoder(batch_first: bool = True, layers: int = 2, **layer_options) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    options = {"dropout": 0.0, **layer_options}
    layer = nn.TransformerEncoderLayer(DIM, HEADS, 2 * DIM, batch_first=batch_first, **options)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=batch_first)


def _padding(batch: int = 3) -> torch.Tensor:
    padding = torch.zeros(batch, N, dtype=torch.bool)
    padding[1, 6:] = True
    padding[-1, 3:] = True
    return padding


def _mha_and_mixer_grads(original: nn.Module, replaced: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = []
    for layer_a, layer_b in zip(original.layers, replaced.layers):
        mha, mixer = layer_a.self_attn, layer_b.self_attn.mixer
        qkv = torch.cat([mixer.q_proj.weight.grad, mixer.k_proj.weight.grad, mixer.v_proj.weight.grad])
        pairs += [(mha.in_proj_weight.grad, qkv), (mha.out_proj.weight.grad, mixer.proj.weight.grad),
                  (layer_a.linear1.weight.grad, layer_b.linear1.weight.grad)]
    return pairs


# -- the proof of a drop-in: softmax with the module's own weights computes what the module computed ---------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", ["padded", "causal"])
def test_softmax_with_copied_weights_equals_the_original(batch_first, kind):
    original = _encoder(batch_first)
    replaced = copy.deepcopy(original)
    assert tokenmix.replace_attention(replaced, "softmax", copy_weights=True, causal=kind == "causal") == 2
    x = torch.randn(3, N, DIM, requires_grad=True)
    padding = _padding() if kind == "padded" else None
    causal_mask = nn.Transformer.generate_square_subsequent_mask(N) if kind == "causal" else None
    real = ~padding if padding is not None else torch.ones(3, N, dtype=torch.bool)
    outputs = []
    for model in (original, replaced):
        inputs = x if batch_first else x.transpose(0, 1)
        y = model(inputs, mask=causal_mask, src_key_padding_mask=padding, is_causal=kind == "causal")
        y = y if batch_first else y.transpose(0, 1)
        (y[real] ** 2).sum().backward()
        outputs.append((y[real].detach(), x.grad.clone()))
        x.grad = None
    torch.testing.assert_close(outputs[1][0], outputs[0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs[1][1], outputs[0][1], atol=1e-5, rtol=1e-5)  # gradient w.r.t. the input
    for grad_a, grad_b in _mha_and_mixer_grads(original, replaced):
        torch.testing.assert_close(grad_b, grad_a, atol=1e-5, rtol=1e-5)


def test_eval_under_no_grad_where_pytorch_would_take_its_fused_path():
    original = _encoder().eval()
    replaced = copy.deepcopy(original)
    tokenmix.replace_attention(replaced, "softmax", copy_weights=True)
    assert original.use_nested_tensor and not replaced.use_nested_tensor
    x, padding = torch.randn(3, N, DIM), _padding()
    with torch.no_grad():
        expected, got = original(x, src_key_padding_mask=padding), replaced(x, src_key_padding_mask=padding)
        single = replaced.layers[0](x, src_key_padding_mask=padding)  # the layer's own fast-path check
    torch.testing.assert_close(got[~padding], expected[~padding], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(single).all()


def test_decoder_self_attention_is_replaced_and_cross_attention_is_not():
    torch.manual_seed(0)
    model = nn.Transformer(DIM, HEADS, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=2 * DIM,
                           dropout=0.0, batch_first=True)
    original = copy.deepcopy(model)
    count = tokenmix.replace_attention(model, "softmax", copy_weights=True,
                                       causal=lambda path: path.startswith("decoder"))
    assert count == 3  # 1 encoder self-attention + 2 decoder self-attentions
    assert all(isinstance(layer.multihead_attn, nn.MultiheadAttention) for layer in model.decoder.layers)
    assert model.decoder.layers[0].self_attn.mixer.causal and not model.encoder.layers[0].self_attn.mixer.causal
    src, tgt = torch.randn(2, N, DIM), torch.randn(2, N - 3, DIM)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(N - 3)
    torch.testing.assert_close(model(src, tgt, tgt_mask=tgt_mask, tgt_is_causal=True),
                               original(src, tgt, tgt_mask=tgt_mask, tgt_is_causal=True), atol=1e-5, rtol=1e-5)


def test_filter_count_and_shared_modules():
    model = nn.ModuleDict({"a": _encoder(layers=3), "b": _encoder(layers=1)})
    assert tokenmix.replace_attention(model, "linear", filter=lambda path: path.startswith("a.")) == 3
    assert isinstance(model["b"].layers[0].self_attn, nn.MultiheadAttention)
    shared = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
    twice = nn.ModuleDict({"x": nn.ModuleDict({"attn": shared}), "y": nn.ModuleDict({"attn": shared})})
    assert tokenmix.replace_attention(twice, "linear") == 1
    assert twice["x"]["attn"] is twice["y"]["attn"]


class _OwnModel(nn.Module):
    """A model of one's own that calls its nn.MultiheadAttention directly, sequence-first and unbatched."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(DIM, HEADS)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def test_a_direct_call_sequence_first_and_unbatched():
    torch.manual_seed(0)
    model = _OwnModel()
    original = copy.deepcopy(model)
    tokenmix.replace_attention(model, "softmax", copy_weights=True)
    x, padding = torch.randn(N, 3, DIM), _padding()
    real = (~padding).T
    torch.testing.assert_close(model(x, padding)[real], original(x, padding)[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(x[:, 0]), original(x[:, 0]), atol=1e-5, rtol=1e-5)  # (L, E)


@pytest.mark.parametrize("average", [True, False])
def test_need_weights_returns_softmax_attention_weights(average):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
    model = nn.ModuleDict({"attn": copy.deepcopy(mha)})
    tokenmix.replace_attention(model, "softmax", copy_weights=True)
    x = torch.randn(2, N, DIM)
    expected_out, expected = mha(x, x, x, need_weights=True, average_attn_weights=average)
    out, weights = model["attn"](x, x, x, need_weights=True, average_attn_weights=average)
    torch.testing.assert_close(weights, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, expected_out, atol=1e-5, rtol=1e-5)


def test_copy_weights_fills_the_projections_of_every_qkv_mechanism():
    """The mechanisms the docstring lists as taking copied weights are exactly the Q/K/V ones."""
    documented = {"softmax", "linear", "performer", "cosformer", "kerformer", "efficient", "sparse_strided",
                  "sparse_fixed", "based", "window_linear"}
    qkv = {n for n in _sequence_mixers()
           if isinstance(tokenmix.create_mixer(n, DIM, max_len=N, causal=not mixer_info(n).bidirectional), QKVMixer)}
    assert qkv == documented
    for name in sorted(documented):
        model = _encoder(layers=1)
        tokenmix.replace_attention(model, name, copy_weights=True, max_len=N, causal=not mixer_info(name).bidirectional)
        mha, adapter = _encoder(layers=1).layers[0].self_attn, model.layers[0].self_attn
        assert adapter.copied == ("q_proj", "k_proj", "v_proj", "proj")
        torch.testing.assert_close(adapter.mixer.v_proj.weight, mha.in_proj_weight[2 * DIM:])
        torch.testing.assert_close(adapter.mixer.proj.bias, mha.out_proj.bias)


# -- every sequence mechanism trains inside a PyTorch encoder ------------------------------------------------------
class _Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8, DIM)
        self.pos = nn.Parameter(0.1 * torch.randn(N, DIM))
        self.encoder = _encoder(layers=1)
        self.head = nn.Linear(DIM, 4)

    def forward(self, tokens: torch.Tensor, causal: bool) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(N) if causal else None
        h = self.encoder(self.embed(tokens) + self.pos, mask=mask, is_causal=causal)
        return self.head(h[:, -1] if causal else h.mean(dim=1))


@pytest.mark.parametrize("name", _sequence_mixers())
def test_every_sequence_mechanism_trains_in_a_pytorch_encoder(name):
    causal = not mixer_info(name).bidirectional
    model = _Classifier()
    assert tokenmix.replace_attention(model, name, causal=causal, max_len=N) == 1
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 8, (256, N), generator=generator)
    labels = (tokens == 3).sum(dim=1).clamp(max=3)  # how often a token occurs: the whole sequence matters
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def loss() -> torch.Tensor:
        return nn.functional.cross_entropy(model(tokens, causal), labels)

    with torch.no_grad():
        before = loss().item()
    for _ in range(25):
        batch = torch.randint(0, 256, (32,), generator=generator)
        step_loss = nn.functional.cross_entropy(model(tokens[batch], causal), labels[batch])
        optimizer.zero_grad()
        step_loss.backward()
        mixer_grads = [p.grad for p in model.encoder.layers[0].self_attn.mixer.parameters()]
        optimizer.step()
    assert any(g is not None and g.abs().sum() > 0 for g in mixer_grads) or not mixer_grads
    with torch.no_grad():
        assert loss().item() < 0.9 * before


@pytest.mark.parametrize("name", ["softmax", "linear"])
def test_under_torch_compile(name):
    model = _encoder(layers=1)
    tokenmix.replace_attention(model, name)
    x, padding = torch.randn(2, N, DIM), _padding(2)
    compiled = torch.compile(model, backend="aot_eager")
    torch.testing.assert_close(compiled(x, src_key_padding_mask=padding), model(x, src_key_padding_mask=padding))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "linear", "performer"])
def test_under_torch_compile_with_inductor(name):
    model = _encoder(layers=1)
    tokenmix.replace_attention(model, name)
    x, padding = torch.randn(2, N, DIM), _padding(2)
    compiled = torch.compile(model)
    torch.testing.assert_close(compiled(x, src_key_padding_mask=padding), model(x, src_key_padding_mask=padding))


# -- errors, one by one, each naming the module's path -----------------------------------------------------------
def _one(**mha_options) -> nn.ModuleDict:
    torch.manual_seed(0)
    return nn.ModuleDict({"block": nn.ModuleDict({"attn": nn.MultiheadAttention(DIM, HEADS, batch_first=True,
                                                                                **mha_options)})})


def _replaced(name: str = "linear", **options) -> MixerAttention:
    model = _one()
    tokenmix.replace_attention(model, name, **options)
    return model["block"]["attn"]


def test_cross_attention_call_raises():
    x = torch.randn(2, N, DIM)
    with pytest.raises(ValueError, match=r"block\.attn.*cross-attention"):
        _replaced()(x, torch.randn(2, N, DIM), x, need_weights=False)


def test_an_arbitrary_attn_mask_raises():
    x = torch.randn(2, N, DIM)
    band = torch.ones(N, N, dtype=torch.bool).triu(3)  # not causal
    with pytest.raises(ValueError, match=r"block\.attn.*neither causal nor empty"):
        _replaced()(x, x, x, attn_mask=band, need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*per-batch or per-head"):
        _replaced()(x, x, x, attn_mask=torch.zeros(2 * HEADS, N, N, dtype=torch.bool), need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*values other than 0 and -inf"):
        _replaced()(x, x, x, attn_mask=torch.randn(N, N), need_weights=False)


def test_an_empty_attn_mask_is_no_mask():
    attn = _replaced()
    x = torch.randn(2, N, DIM)
    torch.testing.assert_close(attn(x, x, x, attn_mask=torch.zeros(N, N), need_weights=False)[0],
                               attn(x, x, x, need_weights=False)[0])


def test_causal_mismatch_raises_both_ways():
    x = torch.randn(2, N, DIM)
    causal = nn.Transformer.generate_square_subsequent_mask(N)
    with pytest.raises(ValueError, match=r"block\.attn.*pass causal=True"):
        _replaced()(x, x, x, attn_mask=causal, need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*pass causal=True"):
        _replaced()(x, x, x, is_causal=True, need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*created causal"):
        _replaced(causal=True)(x, x, x, need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*contextualizer.*cannot run causally"):
        _replaced("contextualizer", causal=True)
    with pytest.raises(ValueError, match=r"block\.attn.*extractor_we.*causal only"):
        _replaced("extractor_we", max_len=N)


def test_need_weights_without_weights_raises():
    x = torch.randn(2, N, DIM)
    with pytest.raises(ValueError, match=r"block\.attn.*'linear' forms no attention-weight matrix"):
        _replaced()(x, x, x)  # nn.MultiheadAttention's default is need_weights=True


def test_dropout_the_mechanism_cannot_apply_raises_unless_ignored():
    model = _one(dropout=0.1)
    with pytest.raises(ValueError, match=r"block\.attn.*attention dropout 0.1.*ignore_dropout=True"):
        tokenmix.replace_attention(model, "linear")
    assert tokenmix.replace_attention(model, "linear", ignore_dropout=True) == 1
    model = _one(dropout=0.1)
    tokenmix.replace_attention(model, "softmax")
    assert model["block"]["attn"].mixer.attn_dropout == 0.1


def test_unsupported_modules_and_mechanisms_raise():
    with pytest.raises(ValueError, match=r"block\.attn.*kdim/vdim"):
        tokenmix.replace_attention(_one(kdim=8, vdim=8), "linear")
    with pytest.raises(ValueError, match=r"block\.attn.*add_bias_kv"):
        tokenmix.replace_attention(_one(add_bias_kv=True), "linear")
    with pytest.raises(ValueError, match=r"'swin' is a vision mixer"):
        tokenmix.replace_attention(_one(), "swin")
    with pytest.raises(ValueError, match=r"'average'.*own residual"):
        tokenmix.replace_attention(_one(), "average")
    with pytest.raises(ValueError, match=r"not the module itself"):
        tokenmix.replace_attention(nn.MultiheadAttention(DIM, HEADS), "linear")
    with pytest.raises(ValueError, match=r"block\.attn.*copy_weights=True: 'relation' has no Q/K/V"):
        tokenmix.replace_attention(_one(), "relation", copy_weights=True)
    with pytest.raises(ValueError, match=r"block\.attn.*no option"):
        tokenmix.replace_attention(_one(), "linear", window=3)


def test_bad_key_padding_masks_raise():
    attn, x = _replaced(), torch.randn(2, N, DIM)
    with pytest.raises(ValueError, match=r"block\.attn.*key_padding_mask must have shape"):
        attn(x, x, x, key_padding_mask=torch.zeros(2, N + 1, dtype=torch.bool), need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*must be bool or floating"):
        attn(x, x, x, key_padding_mask=torch.zeros(2, N, dtype=torch.long), need_weights=False)
    with pytest.raises(ValueError, match=r"block\.attn.*query must be"):
        narrow = x[..., :3]
        attn(narrow, narrow, narrow, need_weights=False)


def test_a_model_with_nothing_to_replace_raises_naming_what_it_has():
    class OwnAttention(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    own = nn.ModuleDict({"block": nn.ModuleDict({"attn": OwnAttention(), "ffn": nn.Linear(DIM, DIM)})})
    with pytest.raises(ValueError, match=r"no nn\.MultiheadAttention to replace; attention-like modules found "
                                         r"instead: block\.attn \(OwnAttention\)"):
        tokenmix.replace_attention(own, "linear")
    with pytest.raises(ValueError, match=r"attention-like modules found instead: none"):
        tokenmix.replace_attention(nn.Sequential(nn.Linear(DIM, DIM)), "linear")
    model = _encoder()
    assert tokenmix.replace_attention(model, "linear") == 2
    with pytest.raises(ValueError, match=r"layers\.0\.self_attn \(MixerAttention\), layers\.1\.self_attn "
                                         r"\(MixerAttention\) \("):  # replaced once already; not its inner mixer
        tokenmix.replace_attention(model, "linear")
    with pytest.raises(ValueError, match=r"nothing replaced: .*layers\.0\.self_attn \(not accepted by filter=\)"):
        tokenmix.replace_attention(_encoder(), "linear", filter=lambda path: False)


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "retention"])
def test_copy_weights_fills_a_gated_mechanisms_projections(name):
    """A gated mechanism with square Q/K/V and output projections takes the module's in_proj thirds and out_proj
    (so linearize can start it from a trained softmax model); GLA's half-width keys and Mamba-2's single input
    projection are refused by shape."""
    original = _encoder()
    model = copy.deepcopy(original)
    assert tokenmix.replace_attention(model, name, causal=True, copy_weights=True) == 2
    mha, mixer = original.layers[0].self_attn, model.layers[0].self_attn.mixer
    for target, weight in zip((mixer.q_proj, mixer.k_proj, mixer.v_proj), mha.in_proj_weight.chunk(3)):
        assert torch.equal(target.weight, weight)
    assert torch.equal(mixer.proj.weight, mha.out_proj.weight) and torch.equal(mixer.proj.bias, mha.out_proj.bias)
    for refused in ("gla", "mamba2"):
        with pytest.raises(ValueError, match=rf"'{refused}' has no Q/K/V and output projections of the module's "
                                             rf"shape \(q_proj and k_proj and v_proj and proj, each 16 x 16\)"):
            tokenmix.replace_attention(_encoder(), refused, causal=True, copy_weights=True)
