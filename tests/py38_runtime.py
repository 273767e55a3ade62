"""What Python 3.8 evaluates at run time and vermin does not check: generics, unions and 3.9+ names.

vermin ignores annotations and cannot tell a run-time alias such as ``Progress = Callable[[str],
None]`` (``collections.abc.Callable``) from a lazy annotation; on Python 3.8 that line is a
TypeError at import. This check walks the code Python runs: everything outside annotations, and
annotations too in a module without ``from __future__ import annotations``.

    python tests/py38_runtime.py FILE...     # one line per finding, exit code 1 when there is any
"""

from __future__ import annotations

import ast
import collections.abc
import sys
from collections.abc import Iterator
from pathlib import Path

BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}  # subscriptable from 3.9
TYPE_NAMES = BUILTIN_GENERICS | {"int", "float", "complex", "str", "bytes", "bool", "object"}
ABC_NAMES = set(collections.abc.__all__)
NEW_METHODS = {"removeprefix": "3.9", "removesuffix": "3.9", "is_relative_to": "3.9", "with_stem": "3.9",
               "bit_count": "3.10"}
NEW_NAMES = {("functools", "cache"): "3.9", ("math", "lcm"): "3.9", ("itertools", "pairwise"): "3.10",
             ("typing", "TypeAlias"): "3.10", ("typing", "ParamSpec"): "3.10", ("typing", "Concatenate"): "3.10",
             ("types", "GenericAlias"): "3.9", ("types", "UnionType"): "3.10"}
NEW_KEYWORDS = {("zip", "strict"): "3.10", ("dataclass", "slots"): "3.10", ("dataclass", "kw_only"): "3.10"}


class Checker(ast.NodeVisitor):
    """Collects ``(line, message)`` findings for one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.lazy = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                        and any(a.name == "annotations" for a in n.names) for n in tree.body)
        self.abc: set[str] = set()  # names bound to collections.abc members
        self.typing: set[str] = set()  # names bound to typing members (for unions)
        self.findings: list[tuple[int, str]] = []

    def add(self, node: ast.AST, message: str) -> None:
        self.findings.append((getattr(node, "lineno", 0), message))

    # ---- annotations: lazy with the __future__ import, evaluated at definition time without it

    def annotation(self, node: ast.AST | None) -> None:
        if node is not None and not self.lazy and not isinstance(node, ast.Constant):
            self.visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                self.annotation(arg.annotation)
        self.annotation(node.returns)
        for child in [*node.decorator_list, *args.defaults, *[d for d in args.kw_defaults if d], *node.body]:
            self.visit(child)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    # ---- names

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name
            if node.module == "collections.abc" and alias.name in ABC_NAMES:
                self.abc.add(bound)
            if node.module == "typing":
                self.typing.add(bound)
            if (node.module, alias.name) in NEW_NAMES:
                self.add(node, f"{node.module}.{alias.name} needs Python {NEW_NAMES[node.module, alias.name]}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in NEW_NAMES:
            self.add(node, f"{node.value.id}.{node.attr} needs Python {NEW_NAMES[node.value.id, node.attr]}")
        self.generic_visit(node)

    def _abc(self, node: ast.AST) -> bool:
        """``Callable`` (from collections.abc) or ``collections.abc.Callable`` / ``abc.Callable``."""
        if isinstance(node, ast.Name):
            return node.id in self.abc
        return isinstance(node, ast.Attribute) and node.attr in ABC_NAMES and ast.unparse(node.value) in (
            "collections.abc", "abc")

    def _typeish(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value is None
        if isinstance(node, ast.Name):
            return node.id in TYPE_NAMES or node.id in self.abc or node.id in self.typing
        if isinstance(node, ast.Subscript):
            return self._typeish(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._typeish(node.left) or self._typeish(node.right)
        return self._abc(node)

    # ---- what runs

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
            alias = node.value.id.capitalize()
            self.add(node, f"{node.value.id}[...] evaluated at run time needs Python 3.9 (use typing.{alias})")
        elif self._abc(node.value):
            self.add(node, f"{ast.unparse(node.value)}[...] from collections.abc evaluated at run time needs Python "
                           "3.9 (use typing's)")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.BitOr) and (self._typeish(node.left) or self._typeish(node.right)):
            self.add(node, f"{ast.unparse(node)} evaluated at run time needs Python 3.10 (use typing.Union/Optional)")
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in NEW_METHODS:
            self.add(node, f".{func.attr}() needs Python {NEW_METHODS[func.attr]}")
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        for keyword in node.keywords:
            if (name, keyword.arg) in NEW_KEYWORDS:
                self.add(node, f"{name}({keyword.arg}=...) needs Python {NEW_KEYWORDS[name, keyword.arg]}")
        self.generic_visit(node)


def findings(path: Path) -> Iterator[str]:
    """``path:line: message`` for each run-time construct Python 3.8 cannot run."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    checker = Checker(tree)
    checker.visit(tree)
    for line, message in sorted(checker.findings):
        yield f"{path}:{line}: {message}"


def main(paths: list[str]) -> int:
    found = [f for p in paths for f in findings(Path(p))]
    print("\n".join(found) or f"{len(paths)} files: nothing Python 3.8 cannot run")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
