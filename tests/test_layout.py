"""The package's shape: no import cycles between modules, no module above 600 lines, none above 400 without a
reason stated in its docstring, and no `# fmt: skip` (a line kept long to fit a cap); import-linter's layer
contracts in pyproject.toml are checked by `make test`."""

import ast
import re
from pathlib import Path

import grimp

PACKAGE = Path(__file__).parents[1] / "noiseaware"
LONG = 400
MAX_LINES = 600
LAYOUT = PACKAGE.parent / "docs" / "layout.md"


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_module_graph_has_no_cycles():
    graph = grimp.build_graph("noiseaware", exclude_type_checking_imports=False)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]


def test_long_modules_say_why_and_none_is_golfed():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        lines = text.count("\n")
        assert lines <= MAX_LINES, f"{path} has {lines} lines: split it by concept (at most {MAX_LINES})"
        if lines > LONG:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            assert "Why this module is long" in docstring, f"{path} has {lines} lines and no stated reason"
        assert "fmt: skip" not in text, f"{path} keeps a line from the formatter (# fmt: skip): write it plainly"


def test_the_module_map_names_every_module():
    """docs/layout.md's table names each module of a subpackage in that subpackage's row, and no module that
    exists neither there nor at the top of the package."""
    rows = re.findall(r"^\| `noiseaware/(\w+)/` \| (.*) \|$", LAYOUT.read_text(), flags=re.MULTILINE)
    assert {name for name, _ in rows} == {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    top = {path.name for path in PACKAGE.glob("*.py")}
    for name, text in rows:
        named = set(re.findall(r"`(\w+\.py)`", text))
        modules = {path.name for path in (PACKAGE / name).glob("*.py")} - {"__init__.py"}
        assert modules <= named, f"layout.md, noiseaware/{name}/ does not name {sorted(modules - named)}"
        assert named <= modules | top, f"layout.md, noiseaware/{name}/ names absent {sorted(named - modules - top)}"
