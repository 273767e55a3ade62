"""The code's layout holds: no module of the console imports itself in a circle, however indirectly (an import
inside a function counts: it only hides the circle).

The graph is grimp's, the one ``lint-imports`` checks the contracts of pyproject.toml on."""

from __future__ import annotations

import grimp
import pytest

# A circle another change removes (issue 52, item 1: ``Answer`` and ``Front`` out of the front's routes); the test
# fails once it is gone, so that its line goes too.
KNOWN = [{"console.front.app", "console.front.responses"}]


@pytest.fixture(scope="module")
def console_graph() -> grimp.ImportGraph:
    return grimp.build_graph("console", include_external_packages=False)


def circles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The modules that import each other in a circle, one set per circle (Tarjan's strongly connected
    components of more than one module, or of one that imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            module, imported = work[-1]
            child = next(imported, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1 or graph.direct_import_exists(importer=module, imported=module):
                    found.append(component)
    return found


def test_no_module_of_the_console_imports_itself_in_a_circle(console_graph: grimp.ImportGraph) -> None:
    found = circles(console_graph)
    assert [c for c in found if c not in KNOWN] == []
    assert [c for c in KNOWN if c not in found] == [], "a known circle is gone: remove it from KNOWN"


def test_a_circle_through_three_modules_and_an_import_inside_a_function_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.d", imported="pkg.a")
    assert circles(graph) == []
    graph.add_import(importer="pkg.c", imported="pkg.a")  # what `from .a import x` inside a function adds
    assert circles(graph) == [{"pkg.a", "pkg.b", "pkg.c"}]
