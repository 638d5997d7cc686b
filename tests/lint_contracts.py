"""An import-linter contract type for what the built-in ones cannot say (``[tool.importlinter]`` in
pyproject.toml names it in ``contract_types``; ``lint-imports`` imports it from the repository root).

import-linter's ``forbidden`` contract takes only top-level external packages (its graph squashes
``trio.testing`` into ``trio``), so :class:`ForbiddenSubmoduleContract` reads the import statements of
every source module itself (``ast``, so imports inside functions and ``TYPE_CHECKING`` blocks count).
"""

from __future__ import annotations

import ast
import importlib.util

from importlinter import Contract, ContractCheck, fields, output


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of everything a module imports: ``import a.b`` gives ``a.b``; ``from a import
    b`` gives ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are skipped (they stay inside
    the package)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append((node.lineno, node.module))
            names += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return names


class ForbiddenSubmoduleContract(Contract):
    """No module of ``source_modules`` (or below them) imports one of ``forbidden_modules`` (dotted names,
    submodules of external packages allowed: ``trio.testing``) or a module below it."""

    type_name = "forbidden_submodule"

    source_modules = fields.ListField(subfield=fields.StringField())
    forbidden_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # noqa: ANN001 - grimp's ImportGraph
        sources = list(self.source_modules)  # type: ignore[call-overload]
        forbidden = list(self.forbidden_modules)  # type: ignore[call-overload]
        found = []
        for module in sorted(graph.modules):
            if not any(module == s or module.startswith(s + ".") for s in sources):
                continue
            spec = importlib.util.find_spec(module)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                continue
            with open(spec.origin, encoding="utf-8") as f:
                tree = ast.parse(f.read(), spec.origin)
            for line, name in _imported_names(tree):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    found.append((module, line, name))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, line, name in check.metadata["found"]:
            output.print_error(f"{module} (line {line}) imports {name}")
            output.new_line()
