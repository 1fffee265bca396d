"""The documentation's Python names import from the paths it shows, and its links lead somewhere.

Users write evaluations by copying what README.md, docs/*.md and the example files show, so
every name they show is a case of its own (its id names the file, the line and the name):

* the import statements of the Python code blocks (fences opened with ```python or ```py) of
  README.md and docs/*.md, and of tuner/examples/*.py: each `import X` and each name of a
  `from X import a, b` is run as that very statement (`from X import a`);
* the backquoted dotted names of the pages' prose that start with `tuner.` (`tuner.evals.Evaluation`,
  `tuner.chess.fen`, a call's parentheses dropped): the longest leading part that is a module
  is imported and the rest read as attributes. Patterns (`tuner.tape.ops.record_*`) and paths
  (`tuner/tape/ops.py`) are not names and are left alone.

A block is read with `ast`; a block that is not a whole program (an excerpt with `...`) is read
statement by statement from its lines that begin with `import` or `from`. The same pages' relative
links (`[text](path#anchor)`) must name an existing file and, with an anchor, one of its headings
(GitHub's anchors); and the pages cite no issue numbers of this project's tracker.
"""
from __future__ import annotations

import ast
import importlib
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = sorted((REPO / "tuner" / "examples").glob("*.py"))
PYTHON_FENCES = ("python", "py")
FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
DOTTED = re.compile(r"`(tuner(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
STATEMENT_START = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import|import)[ \t]", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
ISSUE = re.compile(r"\bissues?[ \t]+(?:no\.?[ \t]*)?#?\d+|(?<![\w&/(])#\d+\b", re.I)


@dataclass(frozen=True)
class Name:
    """One name the documentation shows: `statement` is the import to run (None for a prose name)."""
    page: str
    line: int
    dotted: str
    statement: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{self.dotted}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _prose(text: str) -> str:
    """The text with every fenced code block blanked out (newlines kept, so lines still count)."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _imports(source: str) -> list[tuple[int, str, str]]:
    """(line in `source`, dotted name, statement) of every import of a Python program or excerpt."""
    found: list[tuple[int, str, str]] = []
    try:
        trees = [(0, ast.parse(source))]
    except SyntaxError:  # an excerpt: each statement on its own
        trees = []
        for m in STATEMENT_START.finditer(source):
            start = _line_of(source, m.start()) - 1
            lines = source.splitlines()[start:]
            for end in range(1, len(lines) + 1):  # the shortest run of lines that parses
                try:
                    trees.append((start, ast.parse(textwrap.dedent("\n".join(lines[:end])))))
                    break
                except SyntaxError:
                    continue
            else:  # no run parses: a case that fails on the statement's first line
                found.append((start + 1, lines[0].strip(), lines[0].strip()))
    for first, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(first + node.lineno, a.name, f"import {a.name}") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                found += [(first + node.lineno, f"{module}.{a.name}", f"from {module} import {a.name}")
                          for a in node.names]
    return found


def extract(page: str, text: str) -> list[Name]:
    """Every name a Markdown page shows: its Python blocks' imports and its prose's `tuner.` names."""
    names = []
    for m in FENCE.finditer(text):
        if m.group(2).lower() in PYTHON_FENCES:
            body_line = _line_of(text, m.start(3)) - 1
            names += [Name(page, body_line + line, dotted, statement)
                      for line, dotted, statement in _imports(m.group(3))]
    prose = _prose(text)
    names += [Name(page, _line_of(prose, m.start()), m.group(1)) for m in DOTTED.finditer(prose)]
    return sorted(names, key=lambda n: n.line)


def resolve(name: Name) -> None:
    """Import `name` from exactly the path shown; raises ImportError or AttributeError if it fails."""
    if name.statement is not None:
        exec(name.statement, {})
        return
    parts = name.dotted.split(".")
    for n in range(len(parts), 0, -1):
        module_name = ".".join(parts[:n])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:  # this prefix is no module: try a shorter one
            if e.name is None or not module_name.startswith(e.name):
                raise  # a module that exists failed to import something else
            continue
        for attr in parts[n:]:
            if not hasattr(obj, attr):
                raise AttributeError(f"{name.id}: {'.'.join(parts[:n])} has no "
                                     f"{'.'.join(parts[n:])} ({attr!r} is missing)")
            obj = getattr(obj, attr)
        return
    raise ImportError(f"{name.id}: no module {parts[0]}")


def _documented() -> list[Name]:
    names = []
    for page in PAGES:
        names += extract(str(page.relative_to(REPO)), page.read_text(encoding="utf-8"))
    for example in EXAMPLES:
        page = str(example.relative_to(REPO))
        names += [Name(page, line, dotted, statement)
                  for line, dotted, statement in _imports(example.read_text(encoding="utf-8"))]
    return names


DOCUMENTED = _documented()


def test_the_documented_names_include_the_public_api():
    """The extractor finds what the pages teach (else the parametrised test below tests nothing)."""
    shown = {n.dotted for n in DOCUMENTED}
    for dotted in ("tuner.evals.Evaluation", "tuner.evals.registry.ParamRegistry", "tuner.tape.lin_add",
                   "tuner.tape.ops.record_pair_sigmoid", "tuner.chess.bitboard.popcount"):
        assert dotted in shown, dotted
    pages = {n.page for n in DOCUMENTED}
    assert {"docs/tutorial.md", "docs/evaluations.md", "tuner/examples/kingsafety.py"} <= pages, pages


@pytest.mark.parametrize("name", DOCUMENTED, ids=[n.id for n in DOCUMENTED])
def test_a_documented_name_imports_from_the_path_shown(name):
    resolve(name)


SNIPPET = """\
# A page

Use `tuner.evals.Evaluation`, `tuner.data.registry.search_path(config)` and `tuner.evals.NoSuchThing`;
`tuner.tape.ops.record_*` is a pattern and `tuner/tape/ops.py` a path.

```python
from tuner.tape import lin_add, no_such_recorder
import tuner.no_such_module
```

```sh
python -c 'from tuner.nowhere import x'
```

```python
record_eval(tape, ...) -> value
from tuner.evals.registry import (ParamRegistry,
                                  NoSuchRegistry)
```
"""


def test_the_extractor_reads_a_page_and_fails_on_a_wrong_path():
    names = extract("page.md", SNIPPET)
    assert [(n.line, n.dotted) for n in names] == [
        (3, "tuner.evals.Evaluation"), (3, "tuner.data.registry.search_path"),
        (3, "tuner.evals.NoSuchThing"),
        (7, "tuner.tape.lin_add"), (7, "tuner.tape.no_such_recorder"), (8, "tuner.no_such_module"),
        (17, "tuner.evals.registry.ParamRegistry"), (17, "tuner.evals.registry.NoSuchRegistry")]
    good = {"tuner.evals.Evaluation", "tuner.data.registry.search_path", "tuner.tape.lin_add",
            "tuner.evals.registry.ParamRegistry"}
    for name in names:
        if name.dotted in good:
            resolve(name)
        else:
            with pytest.raises((ImportError, AttributeError)):
                resolve(name)


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens,
    -1, -2, ... appended to repeats."""
    anchors: set[str] = set()
    for heading in HEADING.findall(_prose(text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _links(page: Path) -> list[tuple[int, str]]:
    prose = _prose(page.read_text(encoding="utf-8"))
    return [(_line_of(prose, m.start()), m.group(1)) for m in LINK.finditer(prose)
            if not EXTERNAL.match(m.group(1))]


LINKS = [(page, line, target) for page in PAGES for line, target in _links(page)]


def test_the_pages_link_to_each_other():
    assert any(target.startswith("docs/") for page, _, target in LINKS if page.name == "README.md")


def broken(page: Path, target: str) -> str | None:
    """What is wrong with the relative link `target` of `page`, or None if it leads somewhere."""
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return f"no file {path}"
    if anchor and anchor not in _anchors(file.read_text(encoding="utf-8")):
        return f"no heading with the anchor #{anchor} in {path or page.name}"
    return None


@pytest.mark.parametrize("page, line, target", LINKS,
                         ids=[f"{p.relative_to(REPO)}:{n}:{t}" for p, n, t in LINKS])
def test_a_relative_link_leads_to_a_file_and_heading(page, line, target):
    problem = broken(page, target)
    assert problem is None, f"{page.relative_to(REPO)}:{line}: {target}: {problem}"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# A: the *first* page\n\n## Usage\n\n## Usage\n\n```sh\n# not a heading\n```\n")
    assert _anchors((tmp_path / "a.md").read_text()) == {"a-the-first-page", "usage", "usage-1"}
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#usage-1) [gone](c.md) [web](https://example.org/x.md)\n```sh\n[x](d.md)\n```\n")
    assert _links(page) == [(1, "a.md#usage-1"), (1, "c.md")]
    assert broken(page, "a.md#usage-1") is None and broken(page, "#x") == "no heading with the anchor #x in b.md"
    assert broken(page, "c.md") == "no file c.md"
    assert broken(page, "a.md#not-a-heading") == "no heading with the anchor #not-a-heading in a.md"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_a_page_cites_no_issue_numbers(page):
    prose = _prose(page.read_text(encoding="utf-8"))
    found = [(_line_of(prose, m.start()), m.group(0)) for m in ISSUE.finditer(prose)]
    assert not found, f"{page.relative_to(REPO)}: issue numbers at lines {found}"


def test_an_issue_number_is_found():
    assert [m.group(0) for m in ISSUE.finditer("as issue 12 said; see #7, issues #30; not &#38; or a#1")] \
        == ["issue 12", "#7", "issues #30"]


def test_an_import_that_never_parses_is_a_failing_case():
    names = extract("page.md", "```python\nx = 1 +\nfrom tuner.tape import (lin_add,\n```\n")
    assert [(n.line, n.statement) for n in names] == [(3, "from tuner.tape import (lin_add,")]
    with pytest.raises(SyntaxError):
        resolve(names[0])
