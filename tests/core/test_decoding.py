"""tokenmix.decoding: a user's nn.TransformerEncoder language model, its attention replaced by a causal mechanism,
decodes token by token from each layer's recurrent state and gives what the whole-sequence forward gives."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tokenmix

CAUSAL_QKV = ["softmax", "linear", "performer", "cosformer", "kerformer", "sparse_strided", "sparse_fixed"]
VOCAB, WIDTH, LENGTH = 30, 16, 12


class TinyLM(nn.Module):
    """A user's causal LM: token and learned position embeddings, nn.TransformerEncoder, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(LENGTH, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        n = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(start, start + n, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        return self.head(self.encoder(x, mask=mask, is_causal=n > 1))


def _model(name: str) -> TinyLM:
    torch.manual_seed(0)
    model = TinyLM().eval()
    tokenmix.replace_attention(model, name, causal=True, max_len=LENGTH)
    return model


@pytest.mark.parametrize("name", CAUSAL_QKV)
def test_decoding_step_by_step_gives_the_whole_sequence_forward(name):
    model = _model(name)
    ids = torch.randint(0, VOCAB, (3, LENGTH))
    with torch.no_grad():
        full = model(ids)
        with tokenmix.decoding(model):
            outputs = [model(ids[:, :5])]  # the prompt
            outputs += [model(ids[:, t:t + 1], start=t) for t in range(5, LENGTH)]
        torch.testing.assert_close(torch.cat(outputs, dim=1), full, rtol=1e-4, atol=1e-5)
        assert torch.equal(model(ids), full)  # outside the context: the whole-sequence forward again


def test_the_state_of_a_kernel_mechanism_stays_the_same_size():
    sizes = {}
    for name in ("linear", "softmax"):
        model = _model(name)
        adapter = model.encoder.layers[0].self_attn
        grew = []
        with torch.no_grad(), tokenmix.decoding(model):
            for t in range(LENGTH):
                model(torch.randint(0, VOCAB, (2, 1)), start=t)
                grew.append(sum(v.numel() for v in adapter.decoding_state.values()))
        sizes[name] = grew
    assert len(set(sizes["linear"])) == 1  # a fixed-size state
    assert sizes["softmax"][-1] > sizes["softmax"][0]  # the key/value cache grows


def test_decoding_refuses_what_it_cannot_do():
    model = _model("linear")
    with tokenmix.decoding(model):
        padding = torch.zeros(2, 3)
        padding[1, 2] = float("-inf")  # as PyTorch's layers make it, beside a float causal mask
        with pytest.raises(ValueError, match="padding while decoding"):
            model.encoder(torch.randn(2, 3, WIDTH), mask=nn.Transformer.generate_square_subsequent_mask(3),
                          src_key_padding_mask=padding, is_causal=True)
        with pytest.raises(ValueError, match="nested"):
            with tokenmix.decoding(model):
                pass
    with pytest.raises(ValueError, match="no attention replaced"):
        with tokenmix.decoding(TinyLM()):
            pass
    torch.manual_seed(0)
    bidirectional = TinyLM()
    tokenmix.replace_attention(bidirectional, "linear")
    with pytest.raises(ValueError, match="is not causal"):
        with tokenmix.decoding(bidirectional):
            pass
