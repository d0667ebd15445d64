"""The core alone: ``import tokenmix`` loads no module of the lab, and the README's examples for users of the
mechanisms ("Use it in your own model", "Start from a trained model") run with only the core installed (CI runs
this folder in a venv holding the core and its test extra, nothing of the lab: scripts/test_core.sh)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
LAB = ("cli", "counting", "data", "procmem", "report", "speed", "steptime", "study", "tabulate", "tasks", "timing",
       "training")
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_importing_tokenmix_loads_nothing_of_the_lab():
    code = ("import sys, tokenmix; m = tokenmix.create_mixer('linear', 16, causal=True); "
            "print(sorted(n for n in sys.modules if n.startswith('tokenmix.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lab = [name for name in eval(loaded) if name.split(".")[1] in LAB]
    assert not lab, f"import tokenmix loaded the lab's {lab}"
    assert "'tokenmix.conversion'" in loaded and "'tokenmix.mixers.linear'" in loaded


def test_importing_tokenmix_needs_no_transformers():
    """transformers is an extra: with it missing (``sys.modules`` entry None makes its import fail), ``import
    tokenmix`` and ``tokenmix compare``'s imports succeed (a module-level ``__getattr__`` that imported it for every
    name broke them: the import machinery asks modules for ``__path__``)."""
    code = ("import sys; sys.modules['transformers'] = None; import tokenmix, tokenmix.models.hf_auto; "
            "print(tokenmix.create_mixer('linear', 8)(__import__('torch').randn(1, 3, 8)).shape)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def _section_blocks(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n### {heading}\n")
    end = re.compile(r"^##", re.M).search(text, start + 5).start()
    return FENCE.findall(text[start:end])


@pytest.mark.parametrize("heading", ["Use it in your own model", "Start from a trained model"])
def test_the_readme_examples_for_users_run_on_the_core(heading):
    blocks = _section_blocks(heading)
    assert blocks, heading
    for i, code in enumerate(blocks):
        if "transformers" in code:
            pytest.importorskip("transformers")
        torch.manual_seed(0)
        exec(compile(code, f"README {heading} #{i}", "exec"), {"__name__": "__readme__"})
