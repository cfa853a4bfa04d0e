"""The code's size targets (issue 39), held so they do not regress: no module of ``src/vidax`` over
900 lines, ``VideoPipeline``'s own body under 500 lines, no function over 80 lines in
``vidax/pipelines/`` and ``vidax/cli/`` (the command line), no function of the command line taking
more than 12 parameters nor importing another module's private name. A part that outgrows them is split by what it does, as ``pipelines/base.py`` was.

Lines are counted as the code's statements and comments, not as the formatter wraps them (``ruff
format`` puts one argument a line where a call does not fit): a logical line is what
:mod:`tokenize` ends with a NEWLINE token, plus each comment line and each line of a docstring."""

import ast
import io
import os
import re
import tokenize

from tests.paths import REPO

SRC = os.path.join(REPO, "src", "vidax")
MAX_FILE_LINES = 900
MAX_PIPELINE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules(folder):
    for root, _, files in os.walk(folder):
        yield from (os.path.join(root, f) for f in sorted(files) if f.endswith(".py"))


def _source(path):
    with open(path) as f:
        return f.read()


def _logical_lines(source: str) -> list[int]:
    """The physical line numbers where a logical line starts: a statement (its first line), a
    comment line, and every line of a string that stands alone as a statement (a docstring)."""
    starts, first = set(), None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.COMMENT:
            starts.add(tok.start[0])
            continue
        if first is None:
            first = tok
        if tok.type == tokenize.NEWLINE:
            starts.add(first.start[0])
            if first.type == tokenize.STRING and first.end[0] > first.start[0]:
                starts.update(range(first.start[0], first.end[0] + 1))  # a docstring's every line
            first = None
    return sorted(starts)


def _count(lines: list[int], start: int, end: int) -> int:
    return sum(1 for n in lines if start <= n <= end)


def test_logical_lines_are_counted_as_written():
    """The measure: a call wrapped one argument a line is one line; comments and docstring lines
    count; blank lines do not."""
    wrapped = 'def f(\n    a,\n    b,\n):\n    """Doc\n    more."""\n    # why\n\n    return g(\n        a,\n        b,\n    )\n'
    assert _count(_logical_lines(wrapped), 1, 100) == 5  # def, 2 docstring lines, comment, return


def test_no_module_over_900_lines():
    sizes = {}
    for path in _modules(SRC):
        sizes[os.path.relpath(path, SRC)] = len(_logical_lines(_source(path)))
    assert len(sizes) > 100 and sizes["pipelines/base.py"] > 0  # the walk found the package
    assert {p: n for p, n in sizes.items() if n > MAX_FILE_LINES} == {}


def test_video_pipeline_under_500_lines():
    source = _source(os.path.join(SRC, "pipelines", "base.py"))
    (cls,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "VideoPipeline"]
    assert _count(_logical_lines(source), cls.lineno, cls.end_lineno) < MAX_PIPELINE_LINES


def test_no_function_over_80_lines_in_pipelines_and_the_cli():
    paths = [
        *_modules(os.path.join(SRC, "pipelines")),
        *_modules(os.path.join(SRC, "cli")),
    ]
    long = {}
    for path in paths:
        source = _source(path)
        lines = _logical_lines(source)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _count(lines, node.lineno, node.end_lineno)
                if n > MAX_FUNCTION_LINES:
                    long[f"{os.path.relpath(path, SRC)}:{node.lineno} {node.name}"] = n
    assert len(paths) > 10
    assert long == {}


MAX_CLI_PARAMETERS = 12
#: The command line: its package and what ``vidax serve`` checks before loading.
CLI_MODULES = (os.path.join(SRC, "cli"), os.path.join(SRC, "serve", "command.py"))


def _cli_breaches(source: str) -> list[str]:
    """Each function of ``source`` taking more than :data:`MAX_CLI_PARAMETERS` parameters
    (``self`` / ``cls`` not counted, ``*args`` / ``**kwargs`` counted once each) and each private
    name (``_x``, not ``__x__``) it imports from another module."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None]
            n = len(names) - (names[:1] in (["self"], ["cls"]))
            if n > MAX_CLI_PARAMETERS:
                bad.append(f"{node.name} takes {n} parameters")
        elif isinstance(node, ast.ImportFrom):
            private = [x.name for x in node.names if x.name.startswith("_") and not x.name.endswith("__")]
            bad += [f"imports {node.module}.{name}" for name in private]
    return bad


def test_cli_functions_take_few_parameters_and_import_no_private_name():
    """The command line passes records (:mod:`vidax.cli.records`), not dozens of flags: no function
    of ``vidax/cli/`` or ``vidax/serve/command.py`` takes more than 12 parameters, and none imports
    another module's private name (what modules share is public)."""
    twelve = ", ".join(f"a{i}" for i in range(12))
    assert _cli_breaches(f"def f(self, {twelve}): pass\n") == []
    assert _cli_breaches(f"def f({twelve}, *, b): pass\n") == ["f takes 13 parameters"]
    assert _cli_breaches("from vidax.cli.records import _x, y\nfrom vidax import __version__\n") == [
        "imports vidax.cli.records._x"
    ]
    paths = [p for m in CLI_MODULES for p in ([m] if m.endswith(".py") else _modules(m))]
    assert len(paths) >= 8 and any(p.endswith(os.path.join("cli", "app.py")) for p in paths)
    breaches = {os.path.relpath(p, SRC): b for p in paths if (b := _cli_breaches(_source(p)))}
    assert breaches == {}


# ---------------------------------------------------------------------------------------------
# Issue 49's targets, measured as the files are (physical lines, every parameter but self/cls):
# no module over 900 lines, at most 5 functions over 80 lines, none over 12 parameters.

MAX_LONG_FUNCTIONS = 5
MAX_PARAMETERS = 12

#: The functions over 80 lines that remain (issue 49 allows five): the list may only shrink, an
#: entry that no longer offends fails :func:`test_size_offenders_are_the_allowed_ones` until it
#: is removed.
ALLOWED_LONG_FILES: set[str] = set()
ALLOWED_LONG_FUNCTIONS = {
    "encoders/gemma4.py:all_hidden_states",
    "encoders/gemma4.py:from_config_dict",
    "nn/stack.py:scan_layers",
    "weights/random_weights.py:random_module",
}
ALLOWED_MANY_PARAMETERS: set[str] = set()


def _offenders(root: str = SRC) -> tuple[set[str], set[str], set[str]]:
    """``(files, functions, parameters)``: the modules under ``root`` over 900 lines, the
    functions over 80 lines and those over 12 parameters (``path:name``, paths relative to
    ``root``)."""
    files, functions, parameters = set(), set(), set()
    for path in _modules(root):
        source, rel = _source(path), os.path.relpath(path, root)
        if source.count("\n") > MAX_FILE_LINES:
            files.add(rel)
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                functions.add(f"{rel}:{node.name}")
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            if params and params[0].arg in ("self", "cls"):
                params = params[1:]
            if len(params) > MAX_PARAMETERS:
                parameters.add(f"{rel}:{node.name}")
    return files, functions, parameters


def test_size_offenders_are_the_allowed_ones():
    """No module, function or signature outgrows issue 49's sizes outside the allow-lists, and
    each allow-list holds only what still offends (it can only shrink)."""
    files, functions, parameters = _offenders()
    assert len(list(_modules(SRC))) > 100  # the walk found the package
    assert files == ALLOWED_LONG_FILES, (sorted(files - ALLOWED_LONG_FILES), sorted(ALLOWED_LONG_FILES - files))
    assert functions == ALLOWED_LONG_FUNCTIONS, (
        sorted(functions - ALLOWED_LONG_FUNCTIONS),
        sorted(ALLOWED_LONG_FUNCTIONS - functions),
    )
    assert parameters == ALLOWED_MANY_PARAMETERS, (
        sorted(parameters - ALLOWED_MANY_PARAMETERS),
        sorted(ALLOWED_MANY_PARAMETERS - parameters),
    )


def test_size_measure_finds_each_kind(tmp_path):
    """The measure sees a long module, a long function and a long signature (methods' ``self``
    not counted), and nothing in short ones."""
    params = ", ".join(f"a{i}" for i in range(13))
    (tmp_path / "big.py").write_text(
        f"def wide({params}):\n    pass\n\n\nclass C:\n    def m(self, {params[4:]}):\n        pass\n\n\n"
        "def long():\n" + "    x = 1\n" * 80 + "\n" * 820
    )
    (tmp_path / "small.py").write_text("def f(a):\n    return a\n")
    assert _offenders(str(tmp_path)) == ({"big.py"}, {"big.py:long"}, {"big.py:wide"})


def test_sizes_meet_issue_49s_targets():
    files, functions, parameters = _offenders()
    assert not files and len(functions) <= MAX_LONG_FUNCTIONS and not parameters, (files, functions, parameters)


# ---------------------------------------------------------------------------------------------
# Issue 49's shape of the runtime pipeline: at most 40 methods on VideoPipeline and its bases, no
# family pipeline class more than one level above VideoPipeline. Held as ceilings at what the code
# is now, lowered as it comes nearer the targets (a ceiling above the count fails, so it is kept
# exact).

PIPELINE_METHODS_TARGET, MAX_PIPELINE_METHODS = 40, 36
FAMILY_DEPTH_TARGET, MAX_FAMILY_DEPTH = 1, 1


def _methods(cls: type) -> set[str]:
    """The methods (functions, properties, class and static methods) the class bodies of ``cls``
    and its bases define (``object``'s not counted), by name; a class attribute holding a class
    (a dtype such as ``np.bool_``) is data, not a method."""
    return {
        name
        for c in cls.__mro__[:-1]
        for name, value in vars(c).items()
        if (callable(value) and not isinstance(value, type)) or isinstance(value, (property, classmethod, staticmethod))
    }


def _depth(cls: type, base: type) -> int:
    """How many classes of ``cls``'s chain down to ``base`` (itself included, ``base`` not) are
    subclasses of ``base``: 1 for a direct subclass."""
    return sum(1 for c in cls.__mro__ if issubclass(c, base) and c is not base)


def test_video_pipeline_methods_and_family_depth():
    """VideoPipeline's methods and its deepest family chain stay at their ceilings (issue 49's
    targets: 40 and 1); the measures see a method on a base and a subclass's level."""

    class A:
        def a(self):
            pass

    class B(A):
        x = 1
        dtype = int

        @property
        def b(self):
            return 0

    class C(B):
        pass

    assert _methods(C) == {"a", "b"} and (_depth(B, A), _depth(C, A)) == (1, 2)

    from vidax.pipelines.base import VideoPipeline
    from vidax.registry import registry

    classes = {spec.load() for spec in registry().pipelines(generating_only=False)}
    classes = {c for c in classes if isinstance(c, type) and issubclass(c, VideoPipeline)}
    assert len(classes) >= 10  # the registry's pipelines were found
    depth = max(_depth(c, VideoPipeline) for c in classes)
    assert (len(_methods(VideoPipeline)), depth) == (MAX_PIPELINE_METHODS, MAX_FAMILY_DEPTH), (
        f"now {len(_methods(VideoPipeline))} methods (target {PIPELINE_METHODS_TARGET}), depth {depth} "
        f"(target {FAMILY_DEPTH_TARGET}): lower the ceilings to what the code is"
    )


# ---------------------------------------------------------------------------------------------
# Issue 49's identical duplicated code (at most 12 pairs of places sharing 6 or more identical
# lines, by a duplicate-code scan). The scan itself is too slow for the suite; this holds the count
# with a simple detector of the same kind: lines normalised (white space folded; blank lines,
# comments, lone punctuation and import statements left out), every window of 6 consecutive such
# lines compared by its text, and each pair of files (or two places in one file) sharing a window
# counted once. Its count is near the scan's, not equal (14 where the scan counted 12: the two
# cut lines differently). Held as a ceiling at what the code is now, lowered as it falls (kept exact).

DUPLICATE_WINDOW = 6
#: A window standing in more places than this is boilerplate, not a pair (as the scan's limit).
DUPLICATE_MAX_PLACES = 8
IDENTICAL_PAIRS_TARGET, MAX_IDENTICAL_PAIRS = 12, 8
_PUNCTUATION = frozenset("()[]{},:;")
_IMPORT = re.compile(r"(from\s+[\w.]+\s+import|import\s+[\w.]+)\b")


def _normalised_lines(source: str) -> list[str]:
    """The lines of ``source`` that the duplicate measure compares, white space folded (an
    import statement is passed over with its parenthesised continuation lines)."""
    lines, in_import = [], False
    for line in source.splitlines():
        text = " ".join(line.split())
        if in_import or _IMPORT.match(text):
            in_import = (in_import or "(" in text) and ")" not in text
            continue
        if text and not text.startswith("#") and not set(text) <= _PUNCTUATION:
            lines.append(text)
    return lines


def _identical_pairs(sources: dict[str, str]) -> set[tuple[str, str]]:
    """The pairs ``(a, b)`` (``a <= b``; ``a == b``: two places of one file, not overlapping) of
    ``sources`` (name -> text) sharing a window of :data:`DUPLICATE_WINDOW` identical normalised
    lines that stands in at most :data:`DUPLICATE_MAX_PLACES` places."""
    places: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for name, source in sources.items():
        lines = _normalised_lines(source)
        for k in range(len(lines) - DUPLICATE_WINDOW + 1):
            places.setdefault(tuple(lines[k : k + DUPLICATE_WINDOW]), []).append((name, k))
    pairs = set()
    for where in places.values():
        if len(where) > DUPLICATE_MAX_PLACES:
            continue
        for i, (a, ka) in enumerate(where):
            for b, kb in where[i + 1 :]:
                if a != b or kb - ka >= DUPLICATE_WINDOW:
                    pairs.add((min(a, b), max(a, b)))
    return pairs


def test_identical_duplicate_measure():
    """The measure finds six identical lines in two files and in one, and passes over runs that
    differ in a name, import statements, comments and lone punctuation."""
    run = "".join(f"x{i} = f(a, {i})\n" for i in range(6))
    renamed = run.replace("x3 =", "y3 =")
    imports = "from m import (\n" + "".join(f"    n{i},\n" for i in range(6)) + ")\n"
    noise = "# a comment\n(\n)\n"
    sources = {
        "a.py": imports + run,
        "b.py": "z = 1\n" + run.replace("x2", "x2 ") + noise,
        "c.py": run + noise + run,
        "d.py": imports + renamed,
    }
    assert _identical_pairs(sources) == {("a.py", "b.py"), ("a.py", "c.py"), ("b.py", "c.py"), ("c.py", "c.py")}


def test_identical_duplicated_pairs_at_their_ceiling():
    """The pairs of places of ``src/vidax`` sharing six identical lines stay at their ceiling
    (issue 49's target: 12); lower it to what the code is when a pair goes."""
    sources = {os.path.relpath(p, SRC): _source(p) for p in _modules(SRC)}
    pairs = _identical_pairs(sources)
    assert len(sources) > 100
    assert len(pairs) == MAX_IDENTICAL_PAIRS, (
        f"now {len(pairs)} identical pairs (target {IDENTICAL_PAIRS_TARGET}): lower the ceiling to what the "
        "code is" + "".join(f"\n  {a} ~ {b}" for a, b in sorted(pairs))
    )
