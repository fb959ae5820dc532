"""The package's imports point down and make no circle (docs/architecture.md).

Every part is a sub-package at one layer; a module may import its own part
and the parts below it, never a part above: ``commands`` on top, then the
servers, then the stages in the order data flows, ``config`` and ``core``
at the base. Imports inside functions count too: a lazy import that points
up is still a dependency that points up. Test modules may import anything
but another test module: what tests share lives in ``testing``, which only
tests import (a test module that served as a fixture library tied every
test of a part to another part's tests, and a move of one broke the
other). Every import is written absolute, so a line says where the module
lives. The check reads the source with ``ast``, so it sees what a reader
sees, not what happens to be imported at run time.
"""

from __future__ import annotations

import ast
import tempfile
import unittest
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.layers import LAYERS  # lowest first: a part imports its own layer or below

PACKAGE = "bastion_agent"
ROOT = Path(__file__).resolve().parent

# bastion_agent/__init__.py holds the version only: everything may import it.
BASE_MODULE = PACKAGE
# Production code names where a thing lives; only tests, their fixtures and users use the facade.
FACADE = f"{PACKAGE}.embed"
# Fixtures shared by tests: imported by tests (and benchmarks) only, never by the product.
TESTING = "testing"


@dataclass(frozen=True)
class Import:
    """One import statement: who imports what, and where."""

    importer: str
    imported: str
    line: int
    relative: bool = False


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import of the package's own modules in ``path``, relative ones made absolute."""
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # "from pkg import mod" imports the module pkg.mod when there is one
            targets = [f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}", root) else base
                       for alias in node.names]
        else:
            continue
        relative = bool(getattr(node, "level", 0))
        found += [Import(importer, target, node.lineno, relative) for target in targets
                  if target == root.name or target.startswith(root.name + ".")]
    return found


def _is_module(dotted: str, root: Path) -> bool:
    relative = Path(*dotted.split(".")[1:])
    return (root / relative).with_suffix(".py").is_file() or (root / relative / "__init__.py").is_file()


def part_of(module: str) -> str:
    """``bastion_agent.searching.keyword`` -> ``searching``; a top-level module is its own part."""
    return module.split(".")[1] if "." in module else ""


def is_test(module: str) -> bool:
    return module.rpartition(".")[2].startswith("test_")


def layer_of(part: str) -> int | None:
    return next((index for index, parts in enumerate(LAYERS) if part in parts), None)


def problems(root: Path) -> list[str]:
    """What breaks the rule under ``root``, one line each (empty when all is well)."""
    edges: dict[str, set[str]] = {}
    found = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for item in imports_of(path, root):
            edges.setdefault(item.importer, set()).add(item.imported)
            found += _breaks(item)
    return found + [f"circle: {' -> '.join(cycle)}" for cycle in _cycles(edges)]


def _breaks(item: Import) -> list[str]:
    where = f"{item.importer}:{item.line} imports {item.imported}"
    if item.relative:
        return [f"{where}: write it absolute (bastion_agent.<part>.<module>), as every import here is"]
    if is_test(item.imported):
        return [f"{where}: no module imports a test module (move what tests share to testing/)"]
    if is_test(item.importer) or item.imported == BASE_MODULE.split(".")[0] and "." not in item.imported:
        return []
    if part_of(item.imported) == TESTING and part_of(item.importer) != TESTING:
        return [f"{where}: only tests import testing"]
    if item.imported == FACADE and part_of(item.importer) not in ("embed", TESTING):
        return [f"{where}: import the module the name lives in, not the facade"]
    here, there = layer_of(part_of(item.importer)), layer_of(part_of(item.imported))
    if here is None or there is None:
        return [f"{where}: {part_of(item.importer if here is None else item.imported)!r} is in no layer (LAYERS)"]
    if there > here:
        return [f"{where}: points up ({part_of(item.imported)} is above {part_of(item.importer)})"]
    return []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each circle once, found by depth-first search over production modules."""
    cycles, state = [], {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if is_test(target):
                continue
            if state.get(target) == "open":
                cycles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state and not is_test(module):
            visit(module, [module])
    return cycles


def plant(root: Path, files: dict[str, str]) -> None:
    """Write a made-up package: each relative path with its text (the self-tests' fixtures)."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


class ArchitectureTests(unittest.TestCase):
    def test_imports_point_down_and_make_no_circle(self):
        self.assertEqual(problems(ROOT), [])

    def test_every_part_is_in_a_layer(self):
        parts = {path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()}
        self.assertEqual(sorted(part for part in parts if layer_of(part) is None), [])

    def test_the_check_sees_an_upward_import_a_circle_a_test_import_and_a_relative_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / PACKAGE
            files = {
                "__init__.py": "",
                "core/__init__.py": "",
                "core/errors.py": "def f():\n    from bastion_agent.commands import cli\n",
                "commands/__init__.py": "",
                "commands/cli.py": "from . import sweep\nfrom bastion_agent.testing import stub\n",
                "commands/sweep.py": "from bastion_agent.commands.cli import main\nfrom bastion_agent.commands import test_cli\n",
                "commands/test_cli.py": "from bastion_agent.testing import stub\n",
                "testing/__init__.py": "",
                "testing/stub.py": "",
            }
            plant(root, files)
            found = problems(root)
        self.assertEqual(len(found), 5, found)
        self.assertIn("bastion_agent.core.errors:2 imports bastion_agent.commands.cli: points up"
                      " (commands is above core)", found)
        self.assertIn("bastion_agent.commands.sweep:2 imports bastion_agent.commands.test_cli:"
                      " no module imports a test module (move what tests share to testing/)", found)
        self.assertIn("circle: bastion_agent.commands.cli -> bastion_agent.commands.sweep"
                      " -> bastion_agent.commands.cli", found)
        self.assertIn("bastion_agent.commands.cli:1 imports bastion_agent.commands.sweep: write it absolute"
                      " (bastion_agent.<part>.<module>), as every import here is", found)
        self.assertIn("bastion_agent.commands.cli:2 imports bastion_agent.testing.stub: only tests import testing",
                      found)

    def test_the_check_sees_a_test_module_that_imports_another_in_every_form(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / PACKAGE
            files = {
                "__init__.py": "",
                "core/__init__.py": "",
                "core/errors.py": "",
                "core/test_errors.py": "from bastion_agent.testing.fixture import thing\nfrom bastion_agent.core import errors\n",
                "serving/__init__.py": "",
                "serving/test_serve.py": "from bastion_agent.core.test_errors import Case\n",
                "serving/test_flood.py": "def f():\n    from bastion_agent.serving import test_serve\n",
                "serving/test_tokens.py": "import bastion_agent.core.test_errors\n",
                "testing/__init__.py": "",
                "testing/fixture.py": "from bastion_agent.core import errors\nfrom bastion_agent.serving import test_serve\n",
            }
            plant(root, files)
            found = problems(root)
        rule = "no module imports a test module (move what tests share to testing/)"
        self.assertEqual(sorted(found), sorted([
            f"bastion_agent.serving.test_serve:1 imports bastion_agent.core.test_errors: {rule}",
            f"bastion_agent.serving.test_flood:2 imports bastion_agent.serving.test_serve: {rule}",
            f"bastion_agent.serving.test_tokens:1 imports bastion_agent.core.test_errors: {rule}",
            f"bastion_agent.testing.fixture:2 imports bastion_agent.serving.test_serve: {rule}",
        ]))


if __name__ == "__main__":
    unittest.main()
