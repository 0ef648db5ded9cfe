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

File by file, over the whole repository (the projects, bench/, chaos_project/ and
effect_project/, and rivet/): no file imports, directly or through others, one that imports it
back. That graph (``file_graph``) counts everything an import runs: the imports at module level
and inside functions, the ``__init__`` of each package above the module imported, the module a
lazy name of rivet's root comes from, and a literal ``import_module("...")``.
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
    ("operations", ("rivet.operations",)),
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
            "rivet.dbwait",
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


def module_files(*packages: str, root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's __init__), rivet's by default."""
    found = {}
    paths = [path for package in packages or ("rivet",) for path in (root / package).rglob("*.py")]
    for path in sorted(paths):
        parts = list(path.relative_to(root).with_suffix("").parts)
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


def _module_named(name: str, modules: Mapping[str, object]) -> str:
    """The module ``name`` is, or the nearest one above it ("" when none is of the graph)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


@functools.cache
def import_graph(*packages: str, root: Path = ROOT) -> dict[str, frozenset[str]]:
    """module -> the modules of ``packages`` (rivet's by default) it imports (read once per run)."""
    modules = module_files(*packages, root=root)
    graph: dict[str, frozenset[str]] = {}
    for module, (path, is_package) in modules.items():
        targets = set()
        for name in imported_names(module, is_package, ast.parse(path.read_text())):
            name = _module_named(name, modules)
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


def lazy_exports(root: Path = ROOT) -> dict[str, str]:
    """rivet's root's lazy names (``_EXPORTS``): name -> the module its ``__getattr__`` imports."""
    init = root / "rivet" / "__init__.py"
    if not init.exists():
        return {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_EXPORTS":
            return ast.literal_eval(node.value)
    return {}


def imported_by_literal(tree: ast.Module) -> list[str]:
    """Modules named by a literal in ``import_module("x")`` (importlib's), where that runs."""
    return [
        node.args[0].value
        for node in _runs(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).rpartition(".")[2] == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


@functools.cache
def file_graph(*packages: str, root: Path = ROOT) -> dict[str, frozenset[str]]:
    """file -> the files of ``packages`` that importing it runs: what ``import_graph`` counts,
    and besides the module an import names:

    - the ``__init__`` of every package above it (importing ``a.b.c`` runs ``a`` and ``a.b``
      first), but not of the importer's own packages, which are running already;
    - the module a lazy name of rivet's root comes from (``from rivet import enqueue`` runs
      ``rivet.producer``, through the root's ``__getattr__``);
    - a module named by a literal in ``import_module("...")``.

    Module-level imports and those inside functions both count (a function's import runs the
    first time the function does); ``if TYPE_CHECKING:`` blocks never run and are left out.
    Keyed by dotted module name, one per file (a package by its ``__init__``)."""
    modules = module_files(*packages, root=root)
    exports = lazy_exports(root)
    graph: dict[str, frozenset[str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text())
        names = imported_names(module, is_package, tree) + imported_by_literal(tree)
        names += [exports[n[len("rivet.") :]] for n in names if n[len("rivet.") :] in exports]
        targets = set()
        for name in names:
            name = _module_named(name, modules)
            parts = name.split(".") if name else []
            for depth in range(1, len(parts) + 1):
                above = ".".join(parts[:depth])
                if above in modules and not _inside(module, above):
                    targets.add(above)
        graph[module] = frozenset(targets)
    return graph


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


#: The projects around the library: no file of theirs may import, directly or through others,
#: a file that imports it back (the library's own files are held to it above, module by
#: module, and by ``test_no_file_of_the_repository_imports_one_that_imports_it_back``).
PROJECTS = ("bench", "chaos_project", "effect_project")


def circles(*packages: str, root: Path = ROOT) -> list[list[str]]:
    """The import circles among the files of ``packages``, each as its sorted files' modules."""
    return cycles(file_graph(*packages, root=root))


def test_no_file_of_the_projects_imports_one_that_imports_it_back():
    """bench/, chaos_project/ and effect_project/, file by file, imports in functions too."""
    found = [c for c in circles(*REPOSITORY) if any(_inside(m, p) for m in c for p in PROJECTS)]
    assert found == [], f"import circles among the projects' files: {found}"


def test_no_file_of_the_repository_imports_one_that_imports_it_back():
    """The same over rivet's files too: a package's __init__ and a lazy name count."""
    assert circles(*REPOSITORY) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_circle_through_an_import_inside_a_function_is_found(tmp_path):
    """bench/report.py's old circle: a module-level import one way, a function's the other."""
    root = _plant(
        tmp_path,
        {
            "bench/__init__.py": "",
            "bench/report.py": "from bench.parts import part_targets\n",
            "bench/parts.py": "def part_targets():\n    from bench.report import Target\n",
            "bench/alone.py": "from bench import report\n",
        },
    )
    assert circles("bench", root=root) == [["bench.parts", "bench.report"]]
    # Under TYPE_CHECKING the import never runs: no circle.
    typed = _plant(
        tmp_path / "typed",
        {
            "bench/__init__.py": "",
            "bench/report.py": "from bench.parts import part_targets\n",
            "bench/parts.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from bench.report import Target\n",
        },
    )
    assert circles("bench", root=typed) == []


def test_a_planted_circle_through_a_package_init_is_found(tmp_path):
    """Importing kit.tools runs kit/__init__.py, which imports the importer back."""
    root = _plant(
        tmp_path,
        {
            "proj/__init__.py": "",
            "proj/kit/__init__.py": "from proj.harness import run\n",
            "proj/kit/tools.py": "X = 1\n",
            "proj/harness.py": "def run():\n    pass\nfrom proj.kit.tools import X\n",
        },
    )
    assert circles("proj", root=root) == [["proj.harness", "proj.kit"]]
    assert "proj.kit" not in import_graph("proj", root=root)["proj.harness"]


def test_a_planted_circle_through_a_lazy_name_or_import_module_is_found(tmp_path):
    root = _plant(
        tmp_path,
        {
            "rivet/__init__.py": '_EXPORTS = {"enqueue": "rivet.producer"}\n',
            "rivet/producer.py": "from rivet import stores\n",
            "rivet/stores.py": "def f():\n    from rivet import enqueue\n",
            "rivet/apps.py": 'import importlib\nimportlib.import_module("rivet.checks")\n',
            "rivet/checks.py": "from rivet.apps import X\n",
        },
    )
    assert circles("rivet", root=root) == [
        ["rivet.apps", "rivet.checks"],
        ["rivet.producer", "rivet.stores"],
    ]
