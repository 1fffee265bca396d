"""The layers of `tuner` call downward only (docs/design.md): base modules < tape < chess <
evals < data < train and plots < the tutorial's examples < cli. No module imports a higher
layer, not even lazily inside a function: checked two ways, each shown to catch a planted
upward import.

* An AST scan of every ``import`` of every module of tuner/ (top level, functions, branches).
* Each layer imported, every module of it, in a fresh interpreter where importing any module of
  a higher layer raises.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tuner

PACKAGE = Path(tuner.__file__).parent
#: Layers bottom up; a module may import its own layer and those below. Modules of tuner/ that
#: are in no subpackage listed here (tuner/__init__, jit, fileio, errors, shipped, ...) are the
#: base layer. The examples are the tutorial's user code (package data), above every library
#: layer and below the commands.
LAYERS = ("base", "tape", "chess", "evals", "data", ("train", "plots"), "examples", "cli")
RANK = {name: rank for rank, layer in enumerate(LAYERS)
        for name in ((layer,) if isinstance(layer, str) else layer)}
BASE = "base"


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of `tuner` (None: not a module of tuner)."""
    parts = module.split(".")
    if parts[0] != "tuner":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else BASE


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at `path` in the package folder `root` (named tuner)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tuner", *parts])


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `tree`, wherever it is (relative ones resolved;
    ``from X import y`` gives X)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = package[:len(package) - (node.level - 1)]
                name = ".".join(base + ([name] if name else []))
            found.append((node.lineno, name))
    return found


def modules(root: Path) -> list[tuple[Path, str]]:
    """(file, dotted name) of every module of the package folder `root`."""
    return [(path, module_name(path, root)) for path in sorted(root.rglob("*.py"))]


def upward_imports(root: Path) -> list[str]:
    """Every import in the package folder `root` of a module of a higher layer than the
    importing module's, as ``file:line: [layer] imports name [layer]``."""
    found = []
    for path, module in modules(root):
        here = layer_of(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, name in sorted(imported_modules(tree, module, path.name == "__init__.py")):
            there = layer_of(name)
            if there is not None and RANK[there] > RANK[here]:
                found.append(f"{path.relative_to(root.parent)}:{line}: [{here}] imports "
                             f"{name} [{there}]")
    return found


def test_no_module_imports_a_higher_layer():
    assert upward_imports(PACKAGE) == []


def test_scan_covers_every_layer():
    """The scan reads modules of every layer (it would pass vacuously on an empty list)."""
    seen = {layer_of(name) for _, name in modules(PACKAGE)}
    assert seen == set(RANK)


def test_scan_catches_planted_upward_imports(tmp_path):
    """A copy of the package with upward imports planted, at the top level and lazily inside a
    function, relative and absolute: the scan reports each, with its line."""
    root = tmp_path / "tuner"
    (root / "tape").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "tape" / "__init__.py").write_text("from . import ops\n")
    (root / "tape" / "ops.py").write_text(textwrap.dedent("""\
        import numpy as np
        from tuner.chess.fen import parse_fen

        def f():
            if np:
                from ..cli.terminal import announce_compiling
                import tuner.train.config
        """))
    (root / "jit.py").write_text("import tuner.tape\n")
    assert upward_imports(root) == [
        "tuner/jit.py:1: [base] imports tuner.tape [tape]",
        "tuner/tape/ops.py:2: [tape] imports tuner.chess.fen [chess]",
        "tuner/tape/ops.py:6: [tape] imports tuner.cli.terminal [cli]",
        "tuner/tape/ops.py:7: [tape] imports tuner.train.config [train]",
    ]


#: Run in a fresh interpreter: make every module of the layers in argv[1] (JSON list of names)
#: unimportable, then import the modules in argv[2] (JSON list); print what was imported.
BLOCKED_IMPORT = textwrap.dedent("""\
    import importlib, json, sys

    blocked = json.loads(sys.argv[1])

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            for layer in blocked:
                if name == layer or name.startswith(layer + "."):
                    raise ImportError(f"upward import of {name}")
            return None

    sys.meta_path.insert(0, Blocker())
    for name in json.loads(sys.argv[2]):
        importlib.import_module(name)
    print(json.dumps(sorted(m for m in sys.modules if m == "tuner" or m.startswith("tuner."))))
    """)


def import_blocked(names: list[str], blocked: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Import `names` in a fresh interpreter (working directory `cwd`, first on its path) where
    importing a module of `blocked` (dotted prefixes) raises ImportError."""
    return subprocess.run([sys.executable, "-c", BLOCKED_IMPORT, json.dumps(blocked),
                           json.dumps(names)], capture_output=True, text=True, cwd=cwd,
                          env=_env(cwd))


def _env(cwd: Path) -> dict:
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(PACKAGE.parent),
                                         env.get("PYTHONPATH", "")])
    return env


def _above(layer: str) -> list[str]:
    """The dotted prefixes of the layers above `layer`."""
    return [f"tuner.{name}" for name, rank in RANK.items() if rank > RANK[layer]]


@pytest.mark.parametrize("layer", [name for name in RANK])
def test_layer_imports_with_higher_layers_unimportable(layer, tmp_path):
    names = [name for _, name in modules(PACKAGE)
             if layer_of(name) == layer and not name.endswith(".__main__")]  # a script: it runs
    assert names, f"no module in layer {layer}"
    r = import_blocked(names, _above(layer), tmp_path)
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    assert set(names) <= set(loaded)  # every module of the layer was imported
    assert [m for m in loaded if RANK[layer_of(m)] > RANK[layer]] == []


def test_blocked_import_catches_a_planted_upward_import(tmp_path):
    """The same subprocess, asked to import a module of the tape's layer plus one that imports
    the CLI, fails on the latter and names it."""
    (tmp_path / "planted.py").write_text("def f():\n    return 1\n\nimport tuner.cli\n")
    r = import_blocked(["tuner.tape", "planted"], _above("tape"), tmp_path)
    assert r.returncode != 0
    assert "ImportError: upward import of tuner.cli" in r.stderr


#: Names moved down a layer, by their old importable path and their new home: the old path
#: stays an alias of the same object (docs/evaluations.md, docs/interfaces.md show both).
MOVED_DOWN = [("tuner.data.trace", "tuner.evals.positions",
               ["TraceLayout", "TraceRows", "take_positions", "concat_positions",
                "position_arrays", "position_count", "empty_rows"]),
              ("tuner.train.config", "tuner.errors", ["ConfigError"]),
              ("tuner.data.errors", "tuner.errors", ["clip"])]


@pytest.mark.parametrize("old, new, names", MOVED_DOWN)
def test_moved_names_keep_their_old_path(old, new, names):
    import importlib
    was, now = importlib.import_module(old), importlib.import_module(new)
    assert [n for n in names if getattr(was, n) is not getattr(now, n)] == []


#: Most parameters a function of tuner/ may take (positional, keyword-only, ``*args`` and
#: ``**kwargs`` each one; ``self`` counts).
MAX_PARAMETERS = 8


def wide_functions(root: Path) -> list[str]:
    """``file:line:function (n)`` of every function (def, method, nested, lambda) in the
    modules under `root` that takes more than `MAX_PARAMETERS` parameters, in file order."""
    wide = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        functions = [node for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        for fn in sorted(functions, key=lambda node: node.lineno):
            a = fn.args
            n = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg)
                 + bool(a.kwarg))
            if n > MAX_PARAMETERS:
                wide.append(f"{root.name}/{path.relative_to(root).as_posix()}:{fn.lineno}:"
                            f"{getattr(fn, 'name', '<lambda>')} ({n})")
    return wide


def test_no_function_takes_more_than_8_parameters():
    wide = wide_functions(PACKAGE)
    assert not wide, f"functions with more than {MAX_PARAMETERS} parameters: {wide}"


def test_the_parameter_scan_catches_every_kind_of_parameter(tmp_path):
    root = tmp_path / "tuner"
    root.mkdir()
    (root / "m.py").write_text(textwrap.dedent("""\
        def ok(a, b, c, d, e, f, g, h):
            def inner(a, b, c, d, e, f, g, h, *rest):
                pass
        class C:
            def method(self, a, b, c, d, e, f, g, *, h=0):
                pass
        f = lambda a, b, c, d, e, f, g, h, **kw: None
        @njit
        def kernel(a, b, c, d, e, f, g, h, i):
            pass
        """))
    assert wide_functions(root) == ["tuner/m.py:2:inner (9)", "tuner/m.py:5:method (9)",
                                    "tuner/m.py:7:<lambda> (9)", "tuner/m.py:9:kernel (9)"]


def test_the_recorder_names_ops_binds_from_the_table_are_the_only_names_it_leaves_undefined():
    """tuner/tape/ops.py binds ``_record_<form>`` from `FORM_TABLE` at import, so a linter cannot
    see those names (the file exempts them from ruff's undefined-name check): every global name
    its functions use is defined in the module, a builtin, or one of those recorders, and each
    recorder is bound to its form's."""
    import builtins
    import symtable

    from tuner.tape import ops
    source = (PACKAGE / "tape" / "ops.py").read_text(encoding="utf-8")
    top = symtable.symtable(source, "ops.py", "exec")
    defined = {s.get_name() for s in top.get_symbols()
               if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()
    tables = list(top.get_children())
    while tables:
        table = tables.pop()
        tables += table.get_children()
        used |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    recorders = {f"_record_{name}" for name in ops.FORM_NAMES}
    assert used - defined - set(dir(builtins)) - {"__file__"} <= recorders
    assert used & recorders  # the public recorders do call them
    for f, name in enumerate(ops.FORM_NAMES):
        assert getattr(ops, f"_record_{name}") is ops.RECORD_FORM[f]
