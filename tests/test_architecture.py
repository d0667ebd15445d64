"""The layers of docs/architecture.md, kept by the import-linter contracts in pyproject.toml."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (test extra)")


def _lint(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_are_kept():
    result = _lint(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_contracts())} kept, 0 broken" in result.stdout


def test_the_contract_sees_real_imports(tmp_path):
    """The same package with its top layers upside down breaks the contract: the check is not vacuous."""
    layers = next(c for c in _contracts() if c["id"] == "layers")["layers"]
    upside_down = ",\n".join(f'    "{layer}"' for layer in reversed(layers))
    config = tmp_path / "upside_down.toml"
    config.write_text(f'[tool.importlinter]\nroot_packages = ["tokenmix"]\n\n[[tool.importlinter.contracts]]\n'
                      f'name = "upside down"\ntype = "layers"\ncontainers = ["tokenmix"]\n'
                      f'layers = [\n{upside_down},\n]\n')
    result = _lint(config)
    assert result.returncode != 0
    assert "0 kept, 1 broken" in result.stdout


def test_every_module_of_the_package_is_in_a_layer():
    packages = {p.parent.name for p in (ROOT / "src" / "tokenmix").glob("*/__init__.py")}
    modules = {p.stem for p in (ROOT / "src" / "tokenmix").glob("*.py") if p.stem != "__init__"}
    layers = next(c for c in _contracts() if c["id"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}
    assert named == packages | modules


def test_the_architecture_page_states_the_contracted_layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    for contract in _contracts():
        if contract["type"] != "layers":
            continue
        for layer in contract["layers"]:
            for name in re.split(r"[|:]", layer):
                assert f"`{name.strip()}`" in page, f"docs/architecture.md does not mention `{name.strip()}`"


@pytest.mark.parametrize("package", ["tokenmix.training", "tokenmix.report"])
def test_a_package_docstring_names_its_modules_and_only_those(package):
    import importlib
    import pkgutil
    import re

    module = importlib.import_module(package)
    named = set(re.findall(r":mod:`\.(\w+)`", module.__doc__))
    present = {m.name for m in pkgutil.iter_modules(module.__path__)}
    assert named == present, f"{package}: named but absent {sorted(named - present)}, absent from the docstring " \
                             f"{sorted(present - named)}"


def test_no_function_of_the_package_runs_over_80_lines():
    import ast

    long = []
    for path in sorted((ROOT / "src" / "tokenmix").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


def test_the_core_and_the_lab_ship_every_package_once():
    """Each package of src/tokenmix is in exactly one of the two installables, and the forbidden contract names
    the same cut."""
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lab = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())
    core_packages = set(core["tool"]["setuptools"]["packages"])
    lab_packages = set(lab["tool"]["setuptools"]["packages"])
    inits = (ROOT / "src" / "tokenmix").rglob("__init__.py")
    present = {".".join(p.relative_to(ROOT / "src").parent.parts) for p in inits}
    assert core_packages | lab_packages == present and not core_packages & lab_packages
    forbidden = next(c for c in _contracts() if c["id"] == "core-lab")
    assert set(forbidden["forbidden_modules"]) == lab_packages
    assert set(forbidden["source_modules"]) == {p for p in core_packages if p != "tokenmix"} | {
        f"tokenmix.{m.stem}" for m in (ROOT / "src" / "tokenmix").glob("*.py") if m.stem != "__init__"}
    assert (ROOT / "lab" / "src").resolve() == (ROOT / "src").resolve()
