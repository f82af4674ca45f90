"""The floors of the package (issue 25): the outcome's pure core below the steps and the report, one module
per workflow step, no private name imported from another module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator import engine
from orchestrator.workflow import STEPS

PKG = Path(engine.__file__).resolve().parent
# the node helper's files are flat stdlib scripts pushed as one package (their own rules), the simulator apart
OWN_RULES = ("nodeside/", "sim/")

def _imports(rel: str) -> list[tuple[str, str]]:
    """(absolute module imported from, name) for every `from X import name` of a package file, at any depth."""
    path = PKG / rel
    package = ("orchestrator." + rel[:-3].replace("/", ".")).rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out += [(module, a.name) for a in node.names]
    return out


def _files(under: str = "") -> list[str]:
    return sorted(str(p.relative_to(PKG)) for p in (PKG / under).rglob("*.py")
                  if not str(p.relative_to(PKG)).startswith(OWN_RULES))


@pytest.mark.parametrize("step", STEPS)
def test_each_step_is_the_module_of_its_name(step):
    assert (PKG / "steps" / f"{step}.py").is_file()
    assert engine.step_func(step).__module__ == f"orchestrator.steps.{step}"


@pytest.mark.parametrize("rel", _files("outcome") + _files("report"))
def test_the_outcome_and_the_report_never_import_upwards(rel):
    above = ("orchestrator.steps", "orchestrator.cli", "orchestrator.campaign", "orchestrator.engine",
             "orchestrator.context", "orchestrator.report" if rel.startswith("outcome/") else "-")
    up = [m for m, _ in _imports(rel) if m.startswith(above)]
    assert not up, f"{rel} imports {up}"


def test_nothing_below_the_cli_imports_it():
    up = [(rel, m) for rel in _files() if not rel.startswith(("cli/", "__main__"))
          for m, _ in _imports(rel) if m.startswith("orchestrator.cli")]
    assert not up


def test_no_private_name_is_imported_from_another_module():
    private = {(rel, name) for rel in _files() for m, name in _imports(rel)
               if m.startswith("orchestrator") and name.startswith("_") and not name.startswith("__")}
    assert not private, sorted(private)
