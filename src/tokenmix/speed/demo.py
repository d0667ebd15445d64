"""``tokenmix demo``: every registered mixer, bidirectional and causal where supported, built and run forward and
backward on one random batch (one row half padded), timed, with its parameter count and a finiteness check."""

from __future__ import annotations

import torch

from ..ops.spatial import square_grid
from ..registry import create_mixer, list_mixers, mixer_info

__all__ = ["DEMO_HEADERS", "demo_rows"]

DEMO_HEADERS = ["mixer", "mode", "complexity", "params", "fwd+bwd ms", "status"]


def _time_fwd_bwd(mixer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, repeats: int) -> tuple[float, bool]:
    """The median ms of ``repeats`` forward+backward passes after one warm-up (:func:`tokenmix.timing.measure`,
    torch's current threads), and whether every pass's output and input gradient were finite."""
    from ..timing import measure  # torch.utils.benchmark takes about 0.2 s to import: only where it is used

    spatial = mixer.info.spatial
    outputs = []

    def fwd_bwd() -> None:
        x.grad = None
        y = mixer(x, hw=square_grid(x.shape[1])) if spatial else mixer(x, mask)
        y.square().mean().backward()
        outputs.append((y.detach(), x.grad))

    timing = measure(fwd_bwd, repeats=repeats, warmup=1, threads=None)
    finite = all(bool(torch.isfinite(y).all()) and bool(torch.isfinite(grad).all()) for y, grad in outputs)
    return 1000 * timing.median, finite


def demo_rows(*, dim: int, heads: int, length: int, batch: int, repeats: int, seed: int) -> list[list[str]]:
    """One row (:data:`DEMO_HEADERS`) per mixer and mode, on the same random batch seeded by ``seed`` (spatial
    mixers see it as the most square grid of ``length`` cells, without the padding)."""
    torch.manual_seed(seed)
    x = torch.randn(batch, length, dim, requires_grad=True)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[-1, length // 2:] = False  # one half-padded row, to exercise the padding paths
    rows = []
    for name in list_mixers():
        info = mixer_info(name)
        for causal in (False, True):
            if not (info.causal if causal else info.bidirectional):
                continue
            mixer = create_mixer(name, dim, num_heads=info.heads(heads) or 1, causal=causal, max_len=length)
            params = sum(p.numel() for p in mixer.parameters())
            ms, finite = _time_fwd_bwd(mixer, x, mask, repeats)
            rows.append([name, "causal" if causal else "bidir", info.complexity, f"{params:,}", f"{ms:.1f}",
                         "ok" if finite else "NOT FINITE"])
    return rows
