"""Architecture rules, checked statically on the source: no import cycle, no function-local
import that hides one, the layers import only downwards (model -> estimator -> kernels ->
adapter and warmup -> selection and CLI), the kernel layer knows nothing of NumPyro, no module
keeps a mutable cache, nothing refers to a file outside the repository, every file is at most
400 lines, and a sampler's name is written once (in the registry)."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pplsamplers"
MAX_LINES = 400
LAYERS = {  # a module may import only from its own layer or lower ones
    "types": 0,
    "validation": 0,
    "cache": 0,
    "estimator": 1,
    "kernels": 2,
    "model": 2,
    "diagnostics": 3,
    "warmup": 4,
    "infer": 5,
    "registry": 6,
    "select": 7,
    "datasets": 7,
    "checkpoint": 7,
    "cli": 8,
    "__init__": 9,
}
NUMPYRO_FREE = ("pplsamplers.estimator", "pplsamplers.kernels")
"""Packages that must not import NumPyro or the model layer, even indirectly."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> tuple[set[str], list[str]]:
    """(module-level pplsamplers imports, function-local pplsamplers imports)."""
    tree = ast.parse(path.read_text())
    top, local = set(), []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("pplsamplers")
        ):
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            target = top if node in tree.body else None
            if target is None:
                local.append(node.module)
            else:
                top.update(names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pplsamplers"):
                    (top.add(alias.name) if node in tree.body else local.append(alias.name))
    return top, local


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        top, _ = imports(path)
        targets = {t for t in top if t in known}
        # importing a.b.c runs the __init__ of a.b first (the root package's always runs first
        # and is the public re-export layer, so it is left out)
        for t in list(targets):
            parts = t.split(".")
            targets.update(
                ".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in known
            )
        # a package's own submodules import siblings through it (the package runs first)
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges[name] = targets - {name} - ancestors
    return edges


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_no_function_local_imports_of_the_package():
    hidden = {name: imports(path)[1] for name, path in modules().items()}
    # the CLI defers the JAX stack so that `pplsamplers --help` answers at once
    hidden = {name: local for name, local in hidden.items() if local and name != "pplsamplers.cli"}
    assert not hidden, f"function-local imports hide the dependency graph: {hidden}"


def layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    return LAYERS[key]


def test_layers_import_only_downwards():
    bad = []
    for name, targets in graph().items():
        for target in targets:
            if target != "pplsamplers" and layer(target) > layer(name):
                bad.append(f"{name} -> {target}")
    assert not bad, "upward imports: " + ", ".join(sorted(bad))


def test_only_the_model_layer_knows_numpyro_internals():
    internal = re.compile(r"^\s*(from|import) numpyro\.(handlers|primitives|distributions\.util)")
    offenders = [
        name
        for name, path in modules().items()
        if ".model" not in name
        and any(internal.match(line) for line in path.read_text().splitlines())
    ]
    assert not offenders, f"NumPyro internals used outside model/: {offenders}"


def _imports_numpyro(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        if any(name == "numpyro" or name.startswith("numpyro.") for name in names):
            return True
    return False


def test_the_kernel_layer_knows_nothing_of_numpyro():
    """The estimator and kernels import neither NumPyro nor the model layer, directly or
    through the modules they import."""
    known, edges = modules(), graph()
    offenders = []
    for name in known:
        if not name.startswith(NUMPYRO_FREE):
            continue
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current.startswith("pplsamplers.model") or _imports_numpyro(known[current]):
                offenders.append(f"{name} (through {current})")
                break
            todo.extend(edges[current])
    assert not offenders, "NumPyro reached from the kernel layer: " + ", ".join(offenders)


MUTABLE_CALLS = {"dict", "list", "set", "OrderedDict", "defaultdict", "WeakKeyDictionary",
                 "WeakValueDictionary", "deque"}  # fmt: skip


def _mutable_module_state(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if not names or names == ["__all__"] or value is None:
            continue
        called = value.func if isinstance(value, ast.Call) else None
        callee = getattr(called, "id", getattr(called, "attr", None))
        if isinstance(value, ast.Dict | ast.List | ast.Set) or callee in MUTABLE_CALLS:
            found.append(f"{names[0]} (line {node.lineno})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"global {', '.join(node.names)} (line {node.lineno})")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = getattr(target, "id", getattr(target, "attr", ""))
                if name in ("cache", "lru_cache"):
                    found.append(f"@{name} on {node.name} (line {node.lineno})")
    return found


def test_no_module_keeps_mutable_state():
    """No module-level dict, list or set, no ``global`` rebinding, no memoising decorator:
    values are passed, and constants are immutable (tuples, MappingProxyType)."""
    found = {
        name: hits for name, path in modules().items() if (hits := _mutable_module_state(path))
    }
    assert not found, f"module-level mutable state: {found}"


def test_files_are_short():
    long = {
        name: n
        for name, p in modules().items()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_a_sampler_name_is_written_once():
    from pplsamplers.registry import SAMPLERS

    offenders = []
    for name, path in modules().items():
        if name in ("pplsamplers.registry",):
            continue
        text = path.read_text()
        for sampler in SAMPLERS:
            if re.search(rf"""==\s*["']{sampler}["']|["']{sampler}["']\s*:""", text):
                offenders.append(f"{name}: {sampler!r}")
    assert not offenders, "sampler names dispatched on outside the registry: " + ", ".join(
        offenders
    )
