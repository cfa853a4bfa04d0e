"""The README is the front page (at most 300 lines) and the manual is docs/: every relative link
of README.md and of the pages under docs/ leads to a file (and its ``#anchor`` to a heading of the
page it names), and every repository path ``docs/...`` they quote in backticks exists."""

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: ``[text](target)``; the target ends at the first blank or closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: A repository path quoted in backticks (``docs/offloading.md``); brace / glob patterns are left out.
QUOTED = re.compile(r"`(docs/[^`\s{}*]*)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation other than ``-`` and ``_``
    dropped, blanks as ``-``; a repeated heading's anchor gets ``-1``, ``-2``, ..."""
    count: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            found.add(slug if slug not in count else f"{slug}-{count[slug]}")
            count[slug] = count.get(slug, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that lead nowhere, each as ``'target' (why)``."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target!r} (no {os.path.relpath(file, REPO)})")
        elif anchor and (file.is_dir() or file.suffix != ".md" or anchor not in anchors(file)):
            bad.append(f"{target!r} (no heading #{anchor} in {os.path.relpath(file, REPO)})")
    for quoted in QUOTED.findall(text):
        if not (REPO / quoted).exists():
            bad.append(f"`{quoted}` (no such path in the repository)")
    return bad


def test_readme_is_at_most_300_lines():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move the detail to a page under docs/"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_links_lead_to_files_and_headings(page):
    assert broken_links(page) == []


def test_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    """The check itself: a link to a file that is not there, to a heading a page lacks, and a
    quoted docs/ path that does not exist are reported; a link to an existing heading is not."""
    docs = REPO / "docs"
    page = docs / "families.md"
    good = anchors(page)
    assert "components" in good and "families-and-their-tasks" in good
    probe = tmp_path / "probe.md"
    probe.write_text(
        f"# A b `c` (d)\n\n[ok]({docs / 'families.md'}#components) [self](#a-b-c-d) "
        f"[gone]({docs / 'nowhere.md'}) [anchor]({docs / 'families.md'}#nowhere) `docs/nowhere.md`\n",
        encoding="utf-8",
    )
    bad = broken_links(probe)
    assert len(bad) == 3 and "nowhere.md" in bad[0] and "#nowhere" in bad[1] and "docs/nowhere.md" in bad[2], bad


def fence_errors(text: str) -> list[str]:
    """Code fences that break a page (CommonMark: a fence closes only on a bare fence line): an
    opening fence directly followed by another opening one (a doubled opening turns the rest of
    the page inside out), and a fence left open at the end of the page."""
    errors, open_at = [], None
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if not line.lstrip().startswith("```"):
            continue
        if open_at is None:
            open_at = i
            if i < len(lines) and lines[i].strip().startswith("```") and lines[i].strip() != "```":
                errors.append(f"line {i}: a fence opened twice")
        elif line.strip() == "```":
            open_at = None
    if open_at is not None:
        errors.append(f"line {open_at}: a fence never closed")
    return errors


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_code_fences_are_balanced(page):
    assert fence_errors(page.read_text()) == []


def test_fence_check_finds_a_doubled_and_an_unclosed_fence():
    doubled = "```python\n```python\nx = 1\n```\n```\n"
    assert fence_errors(doubled) == ["line 1: a fence opened twice", "line 5: a fence never closed"]
    assert fence_errors("```\nx\n") == ["line 1: a fence never closed"]
