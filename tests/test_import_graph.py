"""The import graph of the packages: no cycles between modules, and no import up the layering.

The layers, lowest first: sparse_io -> ops -> transforms -> pipelines. A module
may import its own layer and the layers below it. Every import counts, at
module level or inside a function: a function-level import only moves a cycle
to the first call. Lazy imports count too: `importlib.import_module("...")`
with a literal name, and a module-level dict whose values are all module names
(the lazy public-name tables of the package `__init__`s).

The modules are read with `ast`, never imported, so the test needs neither
TensorFlow nor Beam.
"""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("sparse_io", "ops", "transforms", "pipelines")

# Upward imports that are the point of the module that makes them, with the reason.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    # `transforms.testing.ingest_in_memory` runs the whole ingest CLI on in-memory lines; the
    # imports are inside the function, so importing transforms.testing never loads pipelines.
    ("transforms.testing.ingest", "pipelines.config"): "runs the ingest CLI",
    ("transforms.testing.ingest", "pipelines.ingest"): "runs the ingest CLI",
}


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted module name -> (file, is a package `__init__`), for every module of the layers."""
    found = {}
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _owning_module(name: str) -> str | None:
    """The module of ours that `name` (a module, or a name inside one) resolves to; None if not ours."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(dotted name, line) of everything `module` imports, at any depth, lazy imports included."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import name` imports the submodule pkg.name when there is one, else pkg.
            names += [
                (f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix, node.lineno)
                for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append((node.args[0].value, node.lineno))
    for node in tree.body:  # lazy tables: {public name: "defining.module", ...}
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict) and node.value.values:
            values = node.value.values
            if all(isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value in MODULES for v in values):
                names += [(v.value, v.lineno) for v in values]
    return names


def _graph() -> dict[str, dict[str, int]]:
    """importer -> {imported module: first line}, between modules of the layers only."""
    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in MODULES.items():
        edges = graph.setdefault(module, {})
        for name, line in _imported_names(ast.parse(path.read_text(encoding="utf-8"), str(path)), module, is_package):
            target = _owning_module(name)
            if target is not None and target != module:
                edges.setdefault(target, line)
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def _without(graph: dict[str, dict[str, int]], edges) -> dict[str, dict[str, int]]:
    return {a: {b: line for b, line in targets.items() if (a, b) not in edges} for a, targets in graph.items()}


def test_the_scanner_sees_module_function_level_and_lazy_imports():
    assert len(MODULES) > 50 and "sparse_io" in MODULES and "transforms.tfdata.coo" in MODULES
    assert "sparse_io.schema" in GRAPH["sparse_io.shard_set"]  # module level
    assert "sparse_io.tf_bridge" in GRAPH["sparse_io"]  # inside the lazy __getattr__
    assert "ops.layers" in GRAPH["ops"]  # importlib.import_module("ops.layers")
    assert "transforms.tfdata.dataset" in GRAPH["transforms"]  # the lazy public-name table
    assert "sparse_io.atomic" in GRAPH["sparse_io.dead_letters"]  # inside a method only


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"e": 1}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles(_without(graph, {("c", "a")})) == []


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    described = [
        " ; ".join(f"{a} -> {b} (line {GRAPH[a][b]})" for a in cycle for b in GRAPH[a] if b in cycle)
        for cycle in cycles
    ]
    assert not cycles, "import cycles: " + " | ".join(described)


def test_no_import_goes_up_the_layers():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = [
        f"{a} -> {b} (line {line})"
        for a, targets in sorted(GRAPH.items())
        for b, line in sorted(targets.items())
        if rank[b.split(".")[0]] > rank[a.split(".")[0]] and (a, b) not in ALLOWED_UPWARD
    ]
    assert not upward, "imports up the layering sparse_io -> ops -> transforms -> pipelines: " + "; ".join(upward)


def test_every_allowed_upward_import_still_exists():
    stale = [f"{a} -> {b}" for a, b in ALLOWED_UPWARD if b not in GRAPH.get(a, {})]
    assert not stale, f"no longer imported, remove from ALLOWED_UPWARD: {stale}"


TFDATA = "transforms.tfdata"
TFDATA_SOURCES = ("columnar", "logs", "tfrecord")


def _tfdata_room(module: str) -> str | None:
    """The folder of transforms.tfdata a module lives in ('core', a source, or '' for the top); None outside."""
    if module != TFDATA and not module.startswith(TFDATA + "."):
        return None
    parts = module.split(".")
    in_folder = len(parts) > 3 or (len(parts) == 3 and MODULES[module][1])  # a module of a folder, or its __init__
    return parts[2] if in_folder else ""


def test_the_tfdata_folders_are_the_sources_core_and_the_entry_points():
    rooms = {_tfdata_room(m) for m in MODULES} - {None}
    assert rooms == {"", "core", *TFDATA_SOURCES}
    for source in TFDATA_SOURCES:
        assert f"{TFDATA}.{source}.source" in MODULES, f"{source}/ has no source.py entry"


def test_no_tfdata_source_imports_another_source_and_core_imports_no_source():
    wrong = []
    for a, targets in sorted(GRAPH.items()):
        room_a = _tfdata_room(a)
        if room_a is None or room_a == "":
            continue
        for b, line in sorted(targets.items()):
            room_b = _tfdata_room(b)
            if room_b in TFDATA_SOURCES and room_b != room_a:
                wrong.append(f"{a} -> {b} (line {line})")
            if room_a == "core" and room_b == "":
                wrong.append(f"{a} -> {b} (line {line}): core imports an entry point")
    assert not wrong, "imports across the tf.data sources: " + "; ".join(wrong)


def test_the_tfdata_folder_rule_sees_a_crossing():
    assert _tfdata_room("transforms.tfdata.columnar.reader") == "columnar"
    assert _tfdata_room("transforms.tfdata.core.state") == "core"
    assert _tfdata_room("transforms.tfdata.dataset") == ""
    assert _tfdata_room("transforms.beam.stats") is None


def test_no_tfdata_module_is_over_450_lines():
    long = [
        f"{m} ({n} lines)"
        for m, (path, _) in sorted(MODULES.items())
        if m.startswith(TFDATA) and (n := len(path.read_text(encoding="utf-8").splitlines())) > 450
    ]
    assert not long, "split these: " + ", ".join(long)
