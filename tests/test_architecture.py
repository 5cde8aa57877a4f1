"""The package's layers (docs/architecture.md), enforced on its imports as ``ast`` reads them.

The layer table of docs/architecture.md is the one definition: each row's rank, layer and modules (in backticks)
are read from it, and every module of ``elmo/`` must be in it. Imports are read top-level, under ``if
TYPE_CHECKING`` and inside functions alike.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "elmo"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported elmo module (``from elmo.io import nlpl``: elmo.io.nlpl)
    line: int
    local: bool  # inside a function


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@lru_cache(maxsize=None)
def trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in modules().items()}


def _resolve(source: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = source.split(".") if modules()[source].name == "__init__.py" else source.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _walk(node: ast.AST, local: bool = False):
    for child in ast.iter_child_nodes(node):
        inside = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield child, inside
        yield from _walk(child, inside)


@lru_cache(maxsize=None)
def imports() -> tuple[Import, ...]:
    """Every import of an elmo module by an elmo module."""
    found = []
    for source, tree in trees().items():
        for node, local in _walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(source, node)
                # ``from elmo import pretrained`` imports the module elmo.pretrained; ``from elmo import X`` a name
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names]
            else:
                continue
            for target in targets:
                if target == "elmo" or target.startswith("elmo."):
                    found.append(Import(source, target, node.lineno, local))
    return tuple(dict.fromkeys(found))  # one per (module, line, target)


def local_imports() -> list[tuple[str, int, str]]:
    """(module, line, imported) of every function-local import, elmo's and third-party packages' alike."""
    found = []
    for source, tree in trees().items():
        for node, local in _walk(tree):
            if local and isinstance(node, ast.Import):
                found.extend((source, node.lineno, alias.name) for alias in node.names)
            elif local and isinstance(node, ast.ImportFrom):
                found.append((source, node.lineno, _resolve(source, node)))
    return found


@lru_cache(maxsize=None)
def layers() -> dict[str, tuple[int, str]]:
    """module -> (rank, layer), from the table in docs/architecture.md."""
    table: dict[str, tuple[int, str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0].isdigit():
            for name in re.findall(r"`(elmo[\w.]*)`", cells[2]):
                assert name not in table, f"docs/architecture.md names {name} in two layers"
                table[name] = (int(cells[0]), cells[1])
    assert table, "docs/architecture.md: no layer table found (rows '| rank | layer | `modules` | owns |')"
    return table


def is_empty_package(name: str) -> bool:
    """A package ``__init__`` that imports nothing belongs to no layer."""
    path = modules()[name]
    return path.name == "__init__.py" and not any(isinstance(n, (ast.Import, ast.ImportFrom))
                                                  for n in ast.walk(trees()[name]))


def test_the_layer_table_names_every_module_and_only_modules():
    named = set(layers())
    missing = sorted(m for m in modules() if m not in named and not is_empty_package(m))
    assert not missing, f"modules missing from the layer table of docs/architecture.md: {', '.join(missing)}"
    unknown = sorted(named - set(modules()))
    assert not unknown, f"docs/architecture.md names modules that do not exist: {', '.join(unknown)}"


def test_every_elmo_name_in_the_doc_exists():
    """Beyond the table: `elmo.x.y` in backticks is a module, or a name defined at the top of one."""
    wrong = []
    for name in set(re.findall(r"`(elmo(?:\.\w+)+)`", DOC.read_text(encoding="utf-8"))):
        parts = name.split(".")
        prefix = next((k for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules()), 0)
        if prefix < len(parts) and parts[prefix] not in _top_level_names(".".join(parts[:prefix])):
            wrong.append(name)
    assert not wrong, f"docs/architecture.md names what does not exist: {', '.join(sorted(wrong))}"


def _top_level_names(module: str) -> set[str]:
    names = set()
    for node in trees()[module].body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_no_module_imports_from_a_higher_layer_or_a_peer():
    table = layers()
    wrong = []
    for imp in imports():
        if imp.target not in table or imp.source not in table or imp.target == imp.source:
            continue  # empty packages belong to no layer; the table test reports missing modules
        (rank, layer), (target_rank, target_layer) = table[imp.source], table[imp.target]
        if not (target_rank < rank or target_layer == layer):
            wrong.append(f"{modules()[imp.source].relative_to(ROOT)}:{imp.line}: {imp.source} ({layer}, {rank}) "
                         f"imports {imp.target} ({target_layer}, {target_rank})")
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for imp in imports():
        if imp.target in graph and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


LAUNCH = {("elmo.launch", "elmo.cli")}  # the one exception: the script's Ctrl-C answer must come before this import


def test_no_function_local_imports_of_elmo_modules():
    """A local import that dodges a cycle hides a layering fault: put the code in the right layer instead.
    Third-party packages may be imported locally (the optional kiwipiepy, gensim, matplotlib; seqeval, which
    loads scikit-learn)."""
    wrong = [f"{modules()[imp.source].relative_to(ROOT)}:{imp.line}: {imp.target}" for imp in imports()
             if imp.local and (imp.source, imp.target) not in LAUNCH]
    assert not wrong, "function-local imports of elmo modules:\n" + "\n".join(wrong)


def test_local_imports_elsewhere_are_optional_dependencies():
    allowed = ("kiwipiepy", "gensim", "matplotlib", "seqeval")
    wrong = [f"{m}:{line}: {name}" for m, line, name in local_imports()
             if not name.startswith("elmo") and name.split(".")[0] not in allowed]
    assert not wrong, "function-local imports of packages that are not optional:\n" + "\n".join(wrong)


def test_every_public_name_of_elmo_loads_from_its_module():
    import elmo
    assert sorted(elmo.__all__) == sorted(elmo._HOMES)
    for name in elmo.__all__:
        assert getattr(elmo, name) is getattr(importlib.import_module(elmo._HOMES[name]), name)


def test_importing_elmo_loads_no_training_or_task_code():
    code = ("import elmo, sys; [getattr(elmo, name) for name in elmo.__all__]; "
            "print(sorted(m for m in sys.modules if m.startswith('elmo')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env).stdout
    loaded = ast.literal_eval(out.strip())
    assert "elmo.embed" in loaded  # the check looks at the right list
    heavy = [m for m in loaded if m.startswith(("elmo.training", "elmo.tasks", "elmo.cli", "elmo.context"))]
    assert not heavy, f"import elmo loads {', '.join(heavy)}"


def test_importing_elmo_registers_no_hooks_and_changes_no_global_setting():
    """Nothing happens on import: no optimizer hooks (torch keeps them in a module-level dict), no thread count or
    matmul precision changed."""
    code = ("import torch, torch.optim.optimizer as o; before = (len(o._global_optimizer_post_hooks), "
            "len(o._global_optimizer_pre_hooks), torch.get_num_threads(), torch.get_float32_matmul_precision()); "
            "import elmo, elmo.cli, elmo.training.trainer, elmo.tasks.train; "
            "after = (len(o._global_optimizer_post_hooks), len(o._global_optimizer_pre_hooks), "
            "torch.get_num_threads(), torch.get_float32_matmul_precision()); print(before == after, before, after)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env).stdout
    assert out.startswith("True"), f"importing elmo changed global state: {out}"


def test_no_module_over_400_lines():
    long = []
    for path in modules().values():
        relative = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            long.append(f"{relative}: {lines} lines")
    assert not long, f"modules over {MAX_LINES} lines (split them by what they own):\n" + "\n".join(long)


MAX_FUNCTION_LINES = 60


def test_no_function_over_sixty_lines():
    """Small rooms: a function longer than a screen does several things; split it into named steps."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} ({length} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)
