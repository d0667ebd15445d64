"""Shared helpers: build any registered mixer in a configuration the generic tests can run."""

from __future__ import annotations

import pytest
import torch

import tokenmix


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny shapes: intra-op threads only add contention on a small shared machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The generic tests pass max_len=MAX_LEN to every mixer and keep N <= MAX_LEN.
MAX_LEN = 24


def sequence_mixers() -> list[str]:
    return [n for n in tokenmix.list_mixers(include_hidden=True)
            if not n.startswith("_") and not tokenmix.mixer_info(n).spatial]


def modes(name: str) -> list[bool]:
    info = tokenmix.mixer_info(name)
    return [c for c, ok in ((False, info.bidirectional), (True, info.causal)) if ok]


def mixer_cases() -> list:
    """(name, causal) for every registered 1-D mixer and every mode it supports."""
    return [pytest.param(n, c, id=f"{n}-{'causal' if c else 'bidir'}") for n in sequence_mixers() for c in modes(n)]


def build(name: str, dim: int = 16, *, causal: bool | None = None, heads: int = 2, max_len: int = MAX_LEN,
          dtype: torch.dtype = torch.float64, **options) -> torch.nn.Module:
    """``causal=None``: bidirectional where the mechanism can be, causal otherwise."""
    info = tokenmix.mixer_info(name)
    causal = not info.bidirectional if causal is None else causal
    num_heads = heads if info.multihead else 1
    mixer = tokenmix.create_mixer(name, dim, num_heads=num_heads, causal=causal, max_len=max_len, **options)
    return mixer.to(dtype).eval()


def lengths_mask(lengths: list[int], n: int, left: bool = False) -> torch.Tensor:
    """(B, N) bool mask with the given numbers of real tokens, padded on the right (or the left)."""
    pos, lengths_ = torch.arange(n)[None, :], torch.tensor(lengths)[:, None]
    return pos >= n - lengths_ if left else pos < lengths_


def assert_matches_reference(mixer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None, *,
                             rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """Fast path == ``forward_reference``: outputs, and gradients w.r.t. x and every parameter."""
    x = x.detach().clone().requires_grad_(True)
    names = ["x", *(name for name, _ in mixer.named_parameters())]
    inputs = [x, *mixer.parameters()]
    fast = mixer(x, mask)
    cotangent = torch.randn(fast.shape, generator=torch.Generator().manual_seed(123), dtype=fast.dtype)
    grads_fast = torch.autograd.grad((fast * cotangent).sum(), inputs)
    ref = mixer.forward_reference(x, mask)
    grads_ref = torch.autograd.grad((ref * cotangent).sum(), inputs)
    torch.testing.assert_close(fast, ref, rtol=rtol, atol=atol)
    for name, a, b in zip(names, grads_fast, grads_ref):
        assert torch.isfinite(a).all(), f"non-finite gradient for {name}"
        torch.testing.assert_close(a, b, rtol=10 * rtol, atol=10 * atol, msg=lambda m, name=name: f"grad {name}: {m}")


def assert_padding_invisible(mixer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, *,
                             scale: float = 100.0, atol: float = 1e-6) -> None:
    """Content at padded positions changes no real output; padded outputs are zero; each row's real
    outputs equal the mixer run on that row's real tokens alone, unpadded."""
    garbage = torch.where(mask[..., None], x, scale * torch.randn_like(x))
    y, y_garbage = mixer(x, mask), mixer(garbage, mask)
    assert torch.isfinite(y_garbage).all()
    assert (y[mask] - y_garbage[mask]).abs().max() <= atol, "padded content reached a real position"
    assert torch.count_nonzero(y[~mask]) == 0 and torch.count_nonzero(y_garbage[~mask]) == 0
    for row in range(x.shape[0]):
        if mask[row].any():
            alone = mixer(x[row:row + 1, mask[row]])
            torch.testing.assert_close(y[row, mask[row]], alone[0], rtol=1e-6, atol=atol,
                                       msg=lambda m, row=row: f"row {row} differs when run alone: {m}")


@pytest.fixture
def six_novels_dir(tmp_path):
    """A folder of six small .txt novels under the Austen titles, each line unique (its novel and number)."""
    from tokenmix.data.austen import AUSTEN_NOVELS

    folder = tmp_path / "novels"
    folder.mkdir()
    for title in AUSTEN_NOVELS.values():
        word = title.lower().replace(" ", "")[:5]
        lines = [f"[{word}:{i:05d}] said the {word} to it." for i in range(400)]
        (folder / f"{title}.txt").write_text("\n".join(lines), encoding="utf-8")
    return folder
