"""Peak memory of causal linear attention: the chunked form vs the naive cumulative-sum form.

The naive form builds S_i = sum_{j<=i} phi(k_j) v_j^T for every i: an (N, d, d) tensor. The chunked form
(tokenmix.ops.kernel_attention) keeps one d x d state per chunk. Each case runs in a fresh subprocess and
reports its peak resident memory above the baseline taken just before the pass (ru_maxrss on Linux), so
the figure is the allocation peak of the pass itself.

    python benchmarks/causal_linear_memory.py --length 16384 --dim 256
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys


def naive_cumsum_causal_linear(q, k, v, eps=1e-6):
    """phi(Q_i) S_i / phi(Q_i) z_i with S_i = cumsum(phi(K)^T V): materialises (B, H, N, d, d)."""
    import torch.nn.functional as F

    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    states = (phi_k[..., :, None] * v[..., None, :]).cumsum(dim=2)
    z = phi_k.cumsum(dim=2)
    num = (phi_q[..., None, :] @ states).squeeze(-2)
    return num / ((phi_q * z).sum(-1, keepdim=True) + eps)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_case(form: str, n: int, dim: int, backward: bool) -> dict:
    import torch

    from tokenmix.ops.kernel_attention import kernel_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, dim, requires_grad=backward) for _ in range(3))
    if form == "chunked":
        import torch.nn.functional as F

        def fn():
            return kernel_attention(F.elu(q) + 1, F.elu(k) + 1, v, causal=True)
    else:
        def fn():
            return naive_cumsum_causal_linear(q, k, v)
    before = _peak_mb()
    with torch.set_grad_enabled(backward):
        out = fn()
        if backward:
            out.sum().backward()
    return {"form": form, "length": n, "dim": dim, "pass": "fwd+bwd" if backward else "fwd",
            "peak_over_baseline_mb": round(_peak_mb() - before, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--forms", default="chunked,naive")
    parser.add_argument("--passes", default="fwd,fwd+bwd")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        form, backward = args.case.split(":")
        print(json.dumps(run_case(form, args.length, args.dim, backward == "1")))
        return
    print(f"causal linear attention, one head, N={args.length}, d={args.dim}; peak RSS above baseline, "
          "fresh subprocess per case")
    for form in args.forms.split(","):
        for p in args.passes.split(","):
            cmd = [sys.executable, __file__, "--length", str(args.length), "--dim", str(args.dim),
                   "--case", f"{form}:{int(p == 'fwd+bwd')}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                print(f"{form:8s} {p:8s} failed (exit {done.returncode}): {done.stderr.strip()[-200:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{form:8s} {p:8s} {r['peak_over_baseline_mb']:10.1f} MB")


if __name__ == "__main__":
    main()
