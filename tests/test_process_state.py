"""Issue 49's "no process-wide state" (item 3), held by reading the source: no ``global``
statement in ``src/vidax``, and every cache a module keeps (``functools.lru_cache``: compiled
programs keyed by a module structure, shapes or placements, which a long ``vidax serve`` would
otherwise keep adding to) has a bound; ``functools.cache`` / ``lru_cache(maxsize=None)`` have none."""

import ast
import os

import pytest

from tests.paths import REPO

SRC = os.path.join(REPO, "src", "vidax")


def _unbounded(tree: ast.Module) -> list[str]:
    """The functions of a module (``tree``, parsed) under an unbounded cache decorator and its
    ``global`` statements, as ``"name: why"``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{', '.join(node.names)}: global")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in node.decorator_list:
            name = ast.unparse(d.func if isinstance(d, ast.Call) else d)
            if name.split(".")[-1] == "cache":
                found.append(f"{node.name}: {name}")
            elif name.split(".")[-1] == "lru_cache" and isinstance(d, ast.Call):
                size = [k.value for k in d.keywords if k.arg == "maxsize"] + list(d.args[:1])
                if size and isinstance(size[0], ast.Constant) and size[0].value is None:
                    found.append(f"{node.name}: {name}(maxsize=None)")
    return found


def test_the_measure_finds_unbounded_caches_and_globals():
    source = (
        "import functools\nfrom functools import cache, lru_cache\n"
        "@functools.cache\ndef a(x): pass\n@cache\ndef b(x): pass\n"
        "@functools.lru_cache(maxsize=None)\ndef c(x): pass\n@lru_cache(None)\ndef d(x): pass\n"
        "@functools.lru_cache(maxsize=8)\ndef e(x): pass\n@lru_cache\ndef f(x): pass\n"
        "def g():\n    global X\n"
    )
    assert _unbounded(ast.parse(source)) == [
        "a: functools.cache",
        "b: cache",
        "c: functools.lru_cache(maxsize=None)",
        "d: lru_cache(maxsize=None)",
        "X: global",
    ]


@pytest.fixture(scope="module")
def vidax_modules() -> dict[str, ast.Module]:
    """Every module of ``src/vidax``, parsed once for both scans, by path."""
    trees = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                with open(path) as fh:
                    trees[os.path.relpath(path, SRC)] = ast.parse(fh.read())
    return trees


def _found(measure, trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """``measure`` of every module in ``trees`` where it finds something, by path."""
    return {path: bad for path, tree in trees.items() if (bad := measure(tree))}


def test_no_unbounded_cache_nor_global_in_vidax(vidax_modules):
    assert _found(_unbounded, vidax_modules) == {}


#: Module-level tables that start empty and are filled while vidax runs, kept on purpose: weak
#: side tables keyed by a module (an entry goes with its module).
SIDE_TABLES = {"parallel/offload.py": ["_OFFLOADED", "_STACKS"]}

_CONTAINERS = {"set", "dict", "list", "Counter", "defaultdict", "OrderedDict", "deque", "WeakKeyDictionary"}


def _accumulators(tree: ast.Module) -> list[str]:
    """The names a module (``tree``, parsed) binds at its top level to an empty container (``set()``, ``{}``,
    ``collections.Counter()``, ...): state the process adds to as it runs (a warned-about set,
    a trace counter), which belongs to the object that uses it."""
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        v = node.value
        literal = isinstance(v, (ast.List, ast.Set)) and not v.elts or isinstance(v, ast.Dict) and not v.keys
        call = (
            isinstance(v, ast.Call)
            and not v.args
            and not v.keywords
            and ast.unparse(v.func).split(".")[-1] in _CONTAINERS
        )
        if literal or call:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [ast.unparse(t) for t in targets]
    return found


def test_the_measure_finds_module_level_accumulators():
    source = (
        "import collections\nA: set[str] = set()\nB = collections.Counter()\nC = {}\nD = []\n"
        "E = dict(x=1)\nF = {'k': 1}\nG = (1,)\ndef f():\n    H = set()\n"
    )
    assert _accumulators(ast.parse(source)) == ["A", "B", "C", "D"]


def test_no_module_level_accumulator_in_vidax(vidax_modules):
    assert _found(_accumulators, vidax_modules) == SIDE_TABLES
