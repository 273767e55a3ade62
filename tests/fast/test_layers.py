"""The code's layout holds: no module of the console imports itself in a circle, however indirectly (an import
inside a function counts: it only hides the circle), and the layers contract of pyproject.toml (``lint-imports``)
breaks on an import that goes up a layer.

The graph is grimp's, the one ``lint-imports`` checks the contracts on."""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[2]

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
    assert circles(console_graph) == []


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


def contract(kind: type, name: str) -> Any:
    """The contract of pyproject.toml whose name starts with ``name``."""
    config = read_configuration(str(ROOT / "pyproject.toml"))
    options = next(c for c in config["contracts_options"] if c["name"].startswith(name))
    return kind(options["name"], config["session_options"], options)


@pytest.fixture(scope="module")
def layers() -> LayersContract:
    return contract(LayersContract, "the layers of the data flow")


@pytest.fixture(scope="module")
def project_graph() -> grimp.ImportGraph:
    return grimp.build_graph("console", "backend_model", "repo_gen", include_external_packages=True)


def test_the_layers_contract_is_kept(layers: LayersContract, project_graph: grimp.ImportGraph) -> None:
    assert layers.check(deepcopy(project_graph), verbose=False).kept


@pytest.mark.parametrize(("importer", "imported"), [
    ("console.core.turns", "console.tui.app"),  # the core up to a front end
    ("console.clients.call", "console.core.request"),  # the wire up to the core
    ("console.clients.call", "console.server.health"),  # between the independent siblings of a layer
    ("console.metrics.scrape", "console.core.adapters"),  # a metrics page up to the core
    ("console.server.locate", "console.commands.headless"),
    ("repo_gen.writer", "console.server"),  # the generator up to the console
    ("backend_model.engine", "repo_gen.writer"),  # the backend up to the generator
    ("console.tui.app", "console.cli"),  # a front end up to the command group
    ("console.front.http_server", "console.commands.openai"),  # a front end up to the command lines
    ("console.infra.terminal", "console.server.health"),  # what every command runs on, up to the server
])
def test_a_planted_import_up_a_layer_breaks_the_contract(layers: LayersContract, project_graph: grimp.ImportGraph,
                                                          importer: str, imported: str) -> None:
    graph = deepcopy(project_graph)
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert not layers.check(graph, verbose=False).kept


@pytest.mark.parametrize("importer", ["console.core.request", "console.server.process", "repo_gen.writer"])
def test_click_planted_below_the_commands_breaks_its_contract(project_graph: grimp.ImportGraph, importer: str) -> None:
    clickless = contract(ForbiddenContract, "click is the commands'")
    assert clickless.check(deepcopy(project_graph), verbose=False).kept
    graph = deepcopy(project_graph)
    graph.add_import(importer=importer, imported="click", line_number=1, line_contents="import click")
    assert not clickless.check(graph, verbose=False).kept
