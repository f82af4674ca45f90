"""The floors of the package (issue 25): the outcome's pure core below the steps and the report, one module
per workflow step, no private name imported from another module."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from orchestrator import engine
from orchestrator.workflow import STEPS

PKG = Path(engine.__file__).resolve().parent
# the simulator apart (its own rules); the node-side package and the shape library are covered like the rest
OWN_RULES = ("sim/",)

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


@pytest.mark.parametrize("rel", _files("nodeside") + _files("shapelib"))
def test_the_node_side_imports_the_stdlib_itself_and_the_shape_library_only(rel):
    """What is pushed to the node runs alone there: the shape library imports only itself, the node-side
    package itself and the shape library (package-relative), and both the standard library."""
    own = ("orchestrator.shapelib",) if rel.startswith("shapelib/") else ("orchestrator.nodeside", "orchestrator.shapelib")
    tree = ast.parse((PKG / rel).read_text())
    top = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, sorted(top - set(sys.stdlib_module_names))
    outside = [m for m, _ in _imports(rel) if m.startswith("orchestrator") and not m.startswith(own)]
    assert not outside, outside
