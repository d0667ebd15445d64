"""Documentation examples run, so that they cannot go stale: the README's and docs' Python blocks execute, the
``tokenmix ...`` command lines they show parse with today's CLI, every mixer entry quoted in a docstring
(``"name:option=value"``) builds, and every ``>>>`` example in the package passes as a doctest."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
import shlex
from pathlib import Path

import pytest
import torch

import tokenmix
from tokenmix.cli import build_parser
from tokenmix.models.patterns import parse_layer_mixer
from tokenmix.registry import create_mixer, list_mixers, mixer_info

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        found += [(f"{path.name}#{i}", body) for i, (lang, body) in enumerate(FENCE.findall(path.read_text()))
                  if lang == language]
    return found


def _command_lines() -> list[tuple[str, str]]:
    """Every line of a shell block (or a `...` span) of the docs that calls ``tokenmix <subcommand>``."""
    lines = []
    for path in DOCS:
        text = path.read_text()
        shell = "\n".join(body for lang, body in FENCE.findall(text) if lang in ("", "bash", "sh", "shell"))
        spans = re.findall(r"`(tokenmix [^`]+)`", text)
        for line in [*shell.splitlines(), *spans]:
            line = line.split(" #")[0].strip()
            found = re.search(r"(?:^|/)tokenmix ([a-z].*)$", line)
            if found and "<" not in line and "..." not in line and "$" not in found.group(1):
                usage = re.sub(r"(\S+)\|\S+", r"\1", found.group(1))  # `a|b` alternatives: the first
                lines.append((path.name, usage.replace("[", "").replace("]", "")))  # [--optional] parts: given
    return lines


@pytest.mark.parametrize("where,code", _blocks("python"), ids=lambda v: v if "#" in str(v) else None)
def test_python_blocks_run(where, code):
    torch.manual_seed(0)
    exec(compile(code, where, "exec"), {"__name__": "__doc_example__"})


def test_the_docs_have_python_and_command_examples():
    assert len(_blocks("python")) >= 1 and len(_command_lines()) >= 10


@pytest.mark.parametrize("where,command", _command_lines())
def test_command_lines_parse(where, command):
    parser = build_parser()
    try:
        parser.parse_args(shlex.split(command))
    except SystemExit as error:
        pytest.fail(f"{where}: `tokenmix {command}` does not parse (exit {error.code})")


def _docstring_entries() -> list[tuple[str, str]]:
    """Every ``"name"`` / ``"name:option=value,..."`` quoted in a docstring whose name is a registered mixer."""
    names = set(list_mixers())
    entries = []
    for module in _modules():
        for quoted in re.findall(r'``\[?"([a-z_0-9]+(?::[^"]*)?)"', _all_docstrings(module)):
            if quoted.partition(":")[0] in names:
                entries.append((module.__name__, quoted))
    return entries


def _modules() -> list:
    return [importlib.import_module(info.name)
            for info in pkgutil.walk_packages(tokenmix.__path__, "tokenmix.") if not info.name.endswith("__main__")]


def _all_docstrings(module) -> str:
    texts = [module.__doc__ or ""]
    for value in vars(module).values():
        if getattr(value, "__module__", None) == module.__name__:
            texts.append(getattr(value, "__doc__", None) or "")
    return "\n".join(texts)


def test_docstrings_quote_mixer_entries():
    modules = {module for module, _ in _docstring_entries()}
    assert {"tokenmix.models.patterns", "tokenmix.mixers.sparse"} <= modules


@pytest.mark.parametrize("module,entry", _docstring_entries())
def test_docstring_mixer_entries_build(module, entry):
    layer = parse_layer_mixer(entry)
    options = dict(layer.options)
    info = mixer_info(layer.name)
    mixer = create_mixer(layer.name, 32, num_heads=2 if info.multihead else 1, causal=not info.bidirectional,
                         **options)
    if info.spatial:
        y = mixer(torch.randn(1, 64, 32), hw=(8, 8))
    else:
        y = mixer(torch.randn(1, 16, 32), torch.ones(1, 16, dtype=torch.bool))
    assert torch.isfinite(y).all(), f"{module}: {entry}"


def test_doctests_pass():
    failed, tried = 0, 0
    for module in _modules():
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        failed, tried = failed + result.failed, tried + result.attempted
    assert failed == 0
    assert tried >= 2  # the examples of models/patterns.py at least


@pytest.mark.parametrize("where,code", _blocks("toml"), ids=lambda v: v if "#" in str(v) else None)
def test_toml_blocks_parse(where, code):
    import tomllib

    tomllib.loads(code)


def test_the_readme_mechanism_table_names_every_registered_sequence_mixer():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| name | what | complexity | modes |"):]
    table = table[:table.index("\n\n")]
    named = set(re.findall(r"`([a-z0-9_]+)`", "\n".join(line.split(" | ")[0] for line in table.splitlines())))
    missing = sorted(n for n in list_mixers() if n not in named)
    assert not missing, f"README's mechanism table lacks {missing}"
