"""Tests of tokenmix.models.ViT: every bidirectional mixer (1-D and spatial), grid plumbing, alternation."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

import tokenmix
from tokenmix.mixers.base import Mixer, SpatialMixer
from tokenmix.models import ViT

BIDIRECTIONAL = [n for n in tokenmix.list_mixers(include_hidden=True)
                 if not n.startswith("_") and tokenmix.mixer_info(n).bidirectional]
CAUSAL_ONLY = [n for n in tokenmix.list_mixers(include_hidden=True)
               if not n.startswith("_") and not tokenmix.mixer_info(n).bidirectional]
# Point-wise mixers see no context, so with CLS pooling the CLS token never sees a patch (by design:
# "mlp" is 000's context-free Baseline).
CONTEXT_FREE = {"mlp"}


def heads_for(name: str) -> int | None:
    return 2 if tokenmix.mixer_info(name).multihead else None


def images(b: int = 2, c: int = 1, h: int = 28, w: int = 28, seed: int = 0) -> Tensor:
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed))


# -- fake mechanisms, registered once under names the registry-wide tests skip ------------------------
class _AlternatingSpatial(SpatialMixer):
    """Records the grid it was given; ``flag`` is the option the registry alternates."""

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 flag: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        self.flag = flag
        self.lin = nn.Linear(dim, dim)
        self.seen_hw: list[tuple[int, int]] = []

    def _mix_spatial(self, x: Tensor, hw: tuple[int, int], mask: Tensor | None) -> Tensor:
        self.seen_hw.append(hw)
        return self.lin(x).mean(dim=1, keepdim=True).expand_as(x)


class _Recorder(Mixer):
    """A 1-D mixer that records the sequence lengths it mixes."""

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        self.lin = nn.Linear(dim, dim)
        self.seen_n: list[int] = []

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        self.seen_n.append(x.shape[1])
        return self.lin(x).mean(dim=1, keepdim=True).expand_as(x)


if "_test_alternating" not in tokenmix.list_mixers(include_hidden=True):
    tokenmix.register_mixer("_test_alternating", paper="test", complexity="O(N)", causal=False, spatial=True,
                            padding=False, multihead=False, alternate={"flag": True})(_AlternatingSpatial)
if "_test_vit_recorder" not in tokenmix.list_mixers(include_hidden=True):
    tokenmix.register_mixer("_test_vit_recorder", paper="test", complexity="O(N)", causal=False,
                            multihead=False)(_Recorder)


# -- every registered bidirectional mixer -------------------------------------------------------------
@pytest.mark.parametrize("patch", [7, 4], ids=["grid4x4", "grid7x7"])
@pytest.mark.parametrize("name", BIDIRECTIONAL)
def test_forward_backward_with_every_bidirectional_mixer(name, patch):
    info = tokenmix.mixer_info(name)
    poolings = ["mean"] if info.spatial else ["cls", "mean"]
    for pooling in poolings:
        torch.manual_seed(0)
        model = ViT(28, patch, 1, 10, name, 16, 2, heads_for(name), pooling=pooling)
        assert model.grid == (28 // patch + (28 % patch > 0),) * 2
        logits = model(images())
        assert logits.shape == (2, 10) and logits.dtype == torch.float32
        assert torch.isfinite(logits).all()
        logits.square().sum().backward()
        for pname, p in [("head.weight", model.head.weight), ("patch_embed.weight", model.patch_embed.weight)]:
            if pname == "patch_embed.weight" and pooling == "cls" and name in CONTEXT_FREE:
                continue
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}/{pooling}: bad grad for {pname}"
            assert p.grad.abs().sum() > 0, f"{name}/{pooling}: no gradient reaches {pname}"


def test_default_pooling_is_cls_for_1d_and_mean_for_spatial():
    assert ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1).pooling == "cls"
    assert ViT(28, 7, 1, 10, "_test_alternating", 16, 1).pooling == "mean"


# -- image sizes that are not a multiple of the patch -------------------------------------------------
@pytest.mark.parametrize("mixer", ["softmax", "_test_alternating"])
def test_image_not_a_multiple_of_the_patch_is_zero_padded_bottom_right(mixer):
    if mixer not in tokenmix.list_mixers(include_hidden=True):
        pytest.skip(f"mixer {mixer!r} is not registered")
    torch.manual_seed(0)
    model = ViT((30, 26), 4, 3, 5, mixer, 16, 2).eval()
    assert model.grid == (8, 7)
    x = images(2, 3, 30, 26)
    logits = model(x)
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model.patch_embed.weight.grad.abs().sum() > 0
    # Same weights on the explicitly padded 32 x 28 image give the same logits.
    padded = ViT((32, 28), 4, 3, 5, mixer, 16, 2).eval()
    padded.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(padded(F.pad(x, (0, 2, 0, 2))), model(x))


def test_rectangular_patch():
    model = ViT((28, 20), (7, 5), 1, 3, "_test_alternating", 8, 1)
    model(images(1, 1, 28, 20))
    assert model.grid == (4, 4) and model.blocks[0].mixer.seen_hw == [(4, 4)]


# -- what the mixers receive -------------------------------------------------------------------------
def test_alternate_options_go_to_odd_blocks_and_spatial_mixers_get_the_grid():
    model = ViT(28, 4, 1, 10, "_test_alternating", 16, 4)
    assert [block.mixer.flag for block in model.blocks] == [False, True, False, True]
    model(images())
    for block in model.blocks:
        assert block.mixer.seen_hw == [(7, 7)]
        assert block.mixer.max_len == 49
    # Other options reach every block; alternate ones are applied on top in the odd blocks.
    model = ViT(28, 7, 1, 10, "_test_alternating", 16, 3, mixer_options={"flag": False})
    assert [block.mixer.flag for block in model.blocks] == [False, True, False]


def test_1d_mixer_gets_cls_plus_flattened_patches():
    model = ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 2)
    model(images())
    for block in model.blocks:
        assert block.mixer.seen_n == [17]  # CLS + 4 x 4 patches
        assert block.mixer.max_len == 17
    model = ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1, pooling="mean")
    model(images())
    assert model.blocks[0].mixer.seen_n == [16] and model.blocks[0].mixer.max_len == 16


def test_patches_are_flattened_row_major():
    """The block input's token r * Wp + c is patch (r, c): light up one patch and find its token."""
    model = ViT((14, 21), 7, 1, 2, "_test_alternating", 4, 1)
    with torch.no_grad():
        model.patch_embed.weight.fill_(1.0)
        model.patch_embed.bias.zero_()
        model.pos_embed.zero_()
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    x = torch.zeros(1, 1, 14, 21)
    x[:, :, 7:, 14:] = 1.0  # patch (1, 2) of the 2 x 3 grid
    model(x)
    assert seen[0].shape == (1, 6, 4)
    assert seen[0][0, :, 0].nonzero().flatten().tolist() == [1 * 3 + 2]
    assert model.blocks[0].mixer.seen_hw == [(2, 3)]


def test_num_heads_goes_to_mixers_with_heads_only():
    ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1)  # no heads: fine
    # the same policy as the 1-D models: a head-less mixer keeps its single head under a model-level count
    assert ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1, num_heads=2).blocks[0].mixer.num_heads == 1
    with pytest.raises(ValueError, match="num_heads"):
        ViT(28, 7, 1, 10, "softmax", 16, 1, num_heads=0)
    if "softmax" in tokenmix.list_mixers(include_hidden=True):
        model = ViT(28, 7, 1, 10, "softmax", 16, 1, num_heads=4)
        assert model.blocks[0].mixer.num_heads == 4


# -- errors ------------------------------------------------------------------------------------------
def test_spatial_mixer_with_cls_pooling_raises():
    with pytest.raises(ValueError, match="spatial"):
        ViT(28, 7, 1, 10, "_test_alternating", 16, 1, pooling="cls")


@pytest.mark.parametrize("kwargs", [{"pooling": "max"}, {"dropout": 1.0}, {"mlp_ratio": 0},
                                    {"mixer_options": ["flag"]}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1, **kwargs)


@pytest.mark.parametrize("args", [(0, 7, 1, 10), (28, 0, 1, 10), (28, 7, 0, 10), ((28, 28, 1), 7, 1, 10)])
def test_bad_sizes_raise(args):
    with pytest.raises(ValueError):
        ViT(*args, "_test_vit_recorder", 16, 1)


def test_unknown_mixer_raises():
    with pytest.raises(ValueError, match="unknown mixer"):
        ViT(28, 7, 1, 10, "no_such_mixer", 16, 1)


@pytest.mark.parametrize("bad", [
    torch.randn(2, 28, 28),                          # no channel axis
    torch.randn(2, 3, 28, 28),                       # wrong channels
    torch.randn(2, 1, 28, 27),                       # wrong size
    torch.randn(0, 1, 28, 28),                       # empty batch
    torch.randint(0, 255, (2, 1, 28, 28), dtype=torch.uint8),  # not floating point
    torch.randn(2, 1, 28, 28, dtype=torch.float64),  # dtype of the model is float32
    [[0.0]],                                          # not a tensor
], ids=["rank3", "channels", "size", "empty", "uint8", "float64", "list"])
def test_bad_images_raise(bad):
    model = ViT(28, 7, 1, 10, "_test_vit_recorder", 16, 1)
    with pytest.raises(ValueError, match="ViT"):
        model(bad)


def test_causal_only_mixer_raises_naming_it():
    name = "extractor_me" if "extractor_me" in CAUSAL_ONLY else (CAUSAL_ONLY[0] if CAUSAL_ONLY else None)
    if name is None:
        pytest.skip("no causal-only mixer is registered")
    with pytest.raises(ValueError, match=name):
        ViT(28, 7, 1, 10, name, 16, 1)


# -- it learns ---------------------------------------------------------------------------------------
def _blobs(n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Bright 7x7 blob at a random spot in the top-left (class 0) or bottom-right (class 1) quadrant."""
    labels = torch.randint(0, 2, (n,), generator=generator)
    x = 0.3 * torch.randn(n, 1, 28, 28, generator=generator)
    offsets = torch.randint(0, 8, (n, 2), generator=generator)
    for i in range(n):
        r, c = (offsets[i] + 14 * labels[i]).tolist()
        x[i, 0, r:r + 7, c:c + 7] += 1.0
    return x, labels


def test_tiny_vit_learns_a_synthetic_two_class_task():
    if "softmax" not in tokenmix.list_mixers(include_hidden=True):
        pytest.skip("softmax is not registered")
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = ViT(28, 7, 1, 2, "softmax", 16, 1, num_heads=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(100):
        x, y = _blobs(32, generator)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    x, y = _blobs(256, generator)
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=-1) == y).float().mean().item()
    assert accuracy > 0.9, f"accuracy {accuracy:.3f}"
