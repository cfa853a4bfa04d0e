"""Issue 49's "no process-wide state" (item 3), held by reading the source: no ``global``
statement in ``src/vidax``, and every cache a module keeps (``functools.lru_cache``: compiled
programs keyed by a module structure, shapes or placements, which a long ``vidax serve`` would
otherwise keep adding to) has a bound; ``functools.cache`` / ``lru_cache(maxsize=None)`` have none."""

import ast
import os

from tests.paths import REPO

SRC = os.path.join(REPO, "src", "vidax")


def _unbounded(source: str) -> list[str]:
    """The functions of ``source`` under an unbounded cache decorator and its ``global``
    statements, as ``"name: why"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
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
    assert _unbounded(source) == [
        "a: functools.cache",
        "b: cache",
        "c: functools.lru_cache(maxsize=None)",
        "d: lru_cache(maxsize=None)",
        "X: global",
    ]


def test_no_unbounded_cache_nor_global_in_vidax():
    found = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                with open(path) as fh:
                    if bad := _unbounded(fh.read()):
                        found[os.path.relpath(path, SRC)] = bad
    assert found == {}
