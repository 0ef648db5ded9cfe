"""The import layers: rivet's modules import downwards only, and the repository's folders too.

Inside rivet, no module imports one that imports it back, however far.

The graph is built from the source (``ast``, nothing is imported), over every ``import`` in a
module: the top-level ones and those inside functions too, since an import moved into a function
to dodge a cycle is still the same dependency at run time. Only ``if TYPE_CHECKING:`` blocks are
left out (never run). ``from rivet.x import name`` counts as an import of ``rivet.x.name`` when
that is a module, else of ``rivet.x``.

Two checks: no cycle between modules, and every module sits in one of the layers of
docs/architecture.md ("Layers") and imports only from its own layer or the ones below it.

Around rivet (docs/architecture.md, "The repository"): the library imports none of the
repository's projects; the chaos harness and the benchmark both stand on the process kit
(``chaos_project.kit``) and never import each other, nor the ``rivet_chaos`` command on top.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping, Set
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Top to bottom. A module belongs to the layer of the longest prefix that names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "app surface",
        (
            "rivet",
            "rivet.admin",
            "rivet.api",
            "rivet.apps",
            "rivet.backends",
            "rivet.checks",
            "rivet.idempotency",
            "rivet.management",
            "rivet.metrics",
            "rivet.migrations",
            "rivet.models",
            "rivet.routers",
            "rivet.schedules.operate",
            "rivet.urls",
        ),
    ),
    ("producer", ("rivet.producer", "rivet.testing")),
    ("worker", ("rivet.worker",)),
    ("schedules", ("rivet.schedules",)),
    ("jobs", ("rivet.jobs",)),
    ("conformance", ("rivet.conformance",)),
    ("decisions", ("rivet.decisions",)),
    ("stores", ("rivet.stores",)),
    (
        "values, errors, conf",
        (
            "rivet.background",
            "rivet.conf",
            "rivet.dberrors",
            "rivet.errors",
            "rivet.extras",
            "rivet.failpoints",
            "rivet.logs",
            "rivet.retry",
            "rivet.routing",
            "rivet.schedules.cron",
            "rivet.schedules.declare",
            "rivet.schedules.values",
            "rivet.settings_table",
            "rivet.signals",
            "rivet.text",
            "rivet.tracing",
            "rivet.validation",
            "rivet.values",
        ),
    ),
]


#: The repository's Python packages (tests aside): the library and what stands around it.
REPOSITORY = ("rivet", "effect_project", "chaos_project", "bench")


def module_files(*packages: str) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's __init__), rivet's by default."""
    found = {}
    paths = [path for package in packages or ("rivet",) for path in (ROOT / package).rglob("*.py")]
    for path in sorted(paths):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _runs(node: ast.AST) -> list[ast.AST]:
    """The nodes under ``node`` that can run: ``if TYPE_CHECKING:`` bodies are left out."""
    kept = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            kept += [n for branch in child.orelse for n in [branch, *_runs(branch)]]
            continue
        kept += [child, *_runs(child)]
    return kept


def imported_names(module: str, is_package: bool, tree: ast.Module) -> list[str]:
    names = []
    for node in _runs(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            names += [f"{prefix}.{alias.name}" for alias in node.names]
    return names


@functools.cache
def import_graph(*packages: str) -> dict[str, frozenset[str]]:
    """module -> the modules of ``packages`` (rivet's by default) it imports (read once per run)."""
    modules = module_files(*packages)
    graph: dict[str, frozenset[str]] = {}
    for module, (path, is_package) in modules.items():
        targets = set()
        for name in imported_names(module, is_package, ast.parse(path.read_text())):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = frozenset(targets)
    return graph


def cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return groups


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # "rivet" names the package root only, not everything under it.
            inside = prefix != "rivet" and module.startswith(prefix + ".")
            if module == prefix or inside:
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), position)
    return None if best is None else best[1]


def test_the_graph_sees_imports_at_every_depth():
    graph = import_graph()
    # A top-level import, a relative one, and one inside a function body.
    assert "rivet.values" in graph["rivet.stores.base"]
    assert "rivet.worker.loop" in graph["rivet.worker"]
    assert "rivet.worker.metrics" in graph["rivet.management.commands.rivet_worker"]


def test_the_cycle_finder_finds_a_cycle_three_modules_long():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    found = cycles(import_graph())
    assert found == [], f"import cycles between rivet's modules: {found}"


def test_every_module_has_a_layer():
    missing = sorted(m for m in import_graph() if layer_of(m) is None)
    assert missing == [], f"modules in no layer of LAYERS (add them): {missing}"


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_a_layer_imports_only_its_own_and_the_layers_below(layer):
    position = [name for name, _ in LAYERS].index(layer)
    upward = []
    for module, targets in sorted(import_graph().items()):
        if layer_of(module) != position:
            continue
        for target in sorted(targets):
            target_layer = layer_of(target)
            if target_layer is not None and target_layer < position:
                upward.append(f"{module} -> {target} ({LAYERS[target_layer][0]})")
    assert upward == [], f"{layer} imports from the layers above it:\n" + "\n".join(upward)


def test_the_package_root_imports_no_rivet_module_when_imported():
    """``import rivet`` stays cheap and Django-free: its names load on first use."""
    assert import_graph()["rivet"] == frozenset()


def test_every_lazy_export_names_a_module_of_the_library():
    from rivet import _EXPORTS

    modules = module_files()
    for name, module in _EXPORTS.items():
        assert module in modules, (name, module)
        assert layer_of(module) is not None, (name, module)


def test_the_error_tree_depends_on_no_other_rivet_module():
    assert import_graph()["rivet.errors"] == frozenset()


def test_no_module_of_the_library_imports_the_fake():
    importers = sorted(m for m, targets in import_graph().items() if "rivet.testing" in targets)
    assert importers == [], f"rivet.testing is imported by {importers}"


def _inside(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


#: (who, what it must not import, why)
FORBIDDEN = [
    ("rivet", "effect_project", "the library ships alone"),
    ("rivet", "chaos_project", "the library ships alone"),
    ("rivet", "bench", "the library ships alone"),
    ("effect_project", "chaos_project", "the effect service is a project of its own"),
    ("effect_project", "bench", "the effect service is a project of its own"),
    ("chaos_project.kit", "chaos_project.chaos", "the kit sits below the harness"),
    ("chaos_project.kit", "bench", "the kit sits below the benchmark"),
    ("chaos_project.kit", "chaos_project.management", "the kit sits below the command"),
    ("chaos_project.chaos", "bench", "the harness and the benchmark are siblings"),
    ("chaos_project.chaos", "chaos_project.management", "the command sits on top"),
    ("bench", "chaos_project.chaos", "the benchmark and the harness are siblings"),
    ("bench", "chaos_project.management", "the command sits on top"),
]


def repository_imports(who: str, what: str) -> list[str]:
    found = []
    for module, targets in sorted(import_graph(*REPOSITORY).items()):
        if _inside(module, who):
            found += [f"{module} -> {t}" for t in sorted(targets) if _inside(t, what)]
    return found


@pytest.mark.parametrize(
    ("who", "what", "why"), FORBIDDEN, ids=[f"{w}-{x}" for w, x, _ in FORBIDDEN]
)
def test_the_repository_folders_import_downwards(who, what, why):
    assert repository_imports(who, what) == [], f"{who} imports {what} ({why})"


def test_the_repository_graph_sees_the_kit_under_both_runs():
    assert repository_imports("bench", "chaos_project.kit")
    assert repository_imports("chaos_project.chaos", "chaos_project.kit")
    assert repository_imports("chaos_project.management", "bench")
    assert repository_imports("chaos_project.management", "chaos_project.chaos")
