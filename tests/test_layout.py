"""The package's shape: imports point one way down the layers, with no cycle, and none hides in a function.

Read by parsing the source (nothing is imported), so a violation fails here with the file and line,
not later as an ImportError at some user's first request.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_rag"

# Lowest first. A module may import from its own layer or any layer below, never above.
LAYERS: list[tuple[str, ...]] = [
    (
        "django_rag",  # the package root: values and errors; everything else loads lazily
        "django_rag.exceptions",
        "django_rag.types",
        "django_rag.conf",
        "django_rag.signals",
        "django_rag.backends",
        "django_rag.database",
        "django_rag.retry",
        "django_rag.sql",
        "django_rag.bm25",
        "django_rag.validation",
        "django_rag.beir",
        "django_rag.dberrors",
        "django_rag.replicas",
        "django_rag.routers",
    ),
    (
        "django_rag.embedders",
        "django_rag.ingest.loaders",
        "django_rag.ingest.outbound",
        "django_rag.ingest.chunking",
        "django_rag.ingest.packing",  # the chunker's pass
        "django_rag.ingest.segments",  # the chunker's boundaries
        "django_rag.ingest.tokens",  # the chunker's token counting
    ),
    (
        "django_rag.testing",
        "django_rag.querysets",
        "django_rag.models",
        "django_rag.ddl",
        "django_rag.retention",  # pruning the query log and conversations: below web/ and the commands
    ),
    ("django_rag.stores",),
    ("django_rag.ingest", "django_rag.search"),
    ("django_rag.answer",),
    ("django_rag.api",),
    ("django_rag.evaluation",),  # indexes a dataset (ingest) then searches it (search, answer's chat)
    (
        "django_rag.tasks",
        "django_rag.celery_tasks",  # the Celery tasks that django_rag.tasks re-exports
        "django_rag.admin",
        "django_rag.web",
        "django_rag.urls",
        "django_rag.checks",
        "django_rag.management",
    ),
    ("django_rag.apps",),
]

# Function-level imports of the package's own modules that may stay, and why (see STYLE.md 13).
ALLOWED_FUNCTION_IMPORTS = {
    # AppConfig.ready(), the app-registry boundary: these define or use models, so they load once
    # the registry is ready (api defines the KnowledgeBase proxy; importing checks registers them).
    ("django_rag.apps", "django_rag.api"),
    ("django_rag.apps", "django_rag.checks"),
    ("django_rag.apps", "django_rag.tasks"),
    # web.checks registers the RAG["WEB"] checks.
    ("django_rag.apps", "django_rag.web.checks"),
    # search.checks registers the RAG["RERANKERS"] checks.
    ("django_rag.apps", "django_rag.search.checks"),
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, node.module] if node.module else anchor)
    # "from . import api" names a module; "from .models import Chunk" names a module's attribute.
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, modules: set[str]) -> list[Import]:
    module = module_name(path)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_checking(child):
                continue  # typing only: never executed, so neither a dependency nor a cycle
            function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            nested = in_function or isinstance(child, function)
            if isinstance(child, ast.ImportFrom):
                candidates = resolve(child, module, path.name == "__init__.py")
            elif isinstance(child, ast.Import):
                candidates = [alias.name for alias in child.names]
            else:
                visit(child, nested)
                continue
            # Each module named ("from . import api, tasks"), else the module the names come from
            # ("from .models import Chunk" -> django_rag.models).
            named = [name for name in candidates[:-1] if name in modules]
            targets = named or [name for name in candidates[-1:] if name in modules]
            found.extend(Import(module, t, child.lineno, nested) for t in targets if t != module)

    visit(ast.parse(path.read_text()), False)
    return found


def package_imports() -> list[Import]:
    paths = [p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(p) for p in paths}
    return [found for path in sorted(paths) for found in imports_of(path, modules)]


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best:
                best, rank = len(prefix), number
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to tests/test_layout.py LAYERS")
    return rank


def test_every_module_belongs_to_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "migrations" not in path.parts:
            layer_of(module_name(path))


def test_imports_only_point_down_the_layers() -> None:
    upward = [
        f"{i.source}:{i.line} imports {i.target} (layer {layer_of(i.target)} above {layer_of(i.source)})"
        for i in package_imports()
        if not i.in_function and layer_of(i.target) > layer_of(i.source)
    ]
    assert upward == []


def test_search_never_imports_ingest() -> None:
    """Reading never writes: search (and what it imports) has no path into the ingest pipeline.

    The two share a layer, so the layer rule alone would let one import the other; evaluation,
    which indexes a dataset and then searches it, sits above both.
    """
    into_ingest = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in package_imports()
        if _within(i.source, "django_rag.search") and _within(i.target, "django_rag.ingest")
    ]
    assert into_ingest == []


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_package_has_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for found in package_imports():
        if not found.in_function:
            graph.setdefault(found.source, set()).add(found.target)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_no_function_hides_an_import_of_the_package() -> None:
    hidden = [
        f"{i.source}:{i.line} imports {i.target} inside a function"
        for i in package_imports()
        if i.in_function and (i.source, i.target) not in ALLOWED_FUNCTION_IMPORTS
    ]
    assert hidden == []


def test_each_allowed_function_import_says_why() -> None:
    for found in package_imports():
        if found.in_function:
            path = PACKAGE.parent / (found.source.replace(".", "/") + ".py")
            if not path.exists():
                path = path.with_suffix("") / "__init__.py"
            lines = path.read_text().splitlines()
            context = " ".join(lines[max(0, found.line - 3) : found.line])
            assert "#" in context, f"{found.source}:{found.line}: say why this import is in a function"


def test_management_commands_never_import_the_web_layer() -> None:
    # Commands are thin wrappers over library functions; what they share with the pages (the query
    # log, conversations, their pruning) lives below both (django_rag.models, django_rag.retention).
    found = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in package_imports()
        if i.source.startswith("django_rag.management")
        and (i.target == "django_rag.web" or i.target.startswith("django_rag.web."))
    ]
    assert not found, "\n".join(found)


# What builds an embedder or a chat backend. A check validates a backend's options through the
# backend class (``check_options``), without building it: building may load a model or need a secret.
# (Importing a class or a hook with import_string builds nothing, so it stays allowed.)
BUILDERS = {"get_embedder", "load_embedder", "get_chat", "load_chat", "load_backend"}


def is_checks_module(module: str) -> bool:
    parts = module.split(".")
    return "checks" in parts


def test_checks_never_build_embedders_or_chat_backends() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if "migrations" in path.parts or not is_checks_module(module):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found += [
                    f"{module}:{node.lineno} imports {a.name}" for a in node.names if a.name in BUILDERS
                ]
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in BUILDERS:
                    found.append(f"{module}:{node.lineno} calls {name}()")
    assert not found, "\n".join(found)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start)):
            return found
    return None


@pytest.mark.parametrize(
    ("graph", "expected"),
    [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]), ({"a": {"b"}, "b": set()}, None)],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[str] | None) -> None:
    assert find_cycle(graph) == expected
