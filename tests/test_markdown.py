"""The site's Markdown renders as written. Python-Markdown (what mkdocs uses)
reads a list or a table that follows a paragraph line without a blank line as
more of the paragraph, and a nested list indented by fewer than 4 spaces as
items of the outer list: both render as run-on text. This checks every page's
source for them (code blocks excluded), and that a newcomer finds every page
from the README and from the home page."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+\S")
ROW = re.compile(r"^\s*\|")
HEADING = re.compile(r"^\s*#{1,6}\s")
COMMENT = re.compile(r"^\s*<!--.*-->\s*$")       # a block of its own, like a heading


def markdown_problems(text):
    """``(line number, message)`` for each list or table that will not render."""
    problems = []
    kind = None             # what the previous non-blank line belongs to
    after_blank = True
    item_indents = []       # indentation of the list items above, outermost first
    in_fence = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            kind, after_blank, item_indents = "code", False, []
            continue
        if in_fence:
            continue
        if not line.strip():
            after_blank = True
            continue
        item, row = ITEM.match(line), ROW.match(line)
        indent = len(line) - len(line.lstrip())
        if item:
            if not after_blank and kind in ("paragraph", "table"):
                problems.append((number, "a list right after a paragraph line: put a blank "
                                         "line before it"))
            while item_indents and indent < item_indents[-1]:
                item_indents.pop()
            if item_indents and item_indents[-1] < indent < item_indents[-1] + 4:
                problems.append((number, f"a nested list item indented by "
                                         f"{indent - item_indents[-1]} spaces: indent it by 4"))
            if not item_indents or indent > item_indents[-1]:
                item_indents.append(indent)
            kind = "list"
        elif row:
            if not after_blank and kind not in ("table", "heading"):
                problems.append((number, "a table right after a line of text: put a blank "
                                         "line before it"))
            kind, item_indents = "table", []
        elif HEADING.match(line) or COMMENT.match(line):
            kind, item_indents = "heading", []
        elif after_blank or kind not in ("list", "paragraph"):
            # a new paragraph, unless it is indented under a list item
            kind = "list" if kind == "list" and item_indents and indent > item_indents[0] \
                else "paragraph"
            if kind == "paragraph":
                item_indents = []
        after_blank = False
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_lists_and_tables_render(page):
    problems = markdown_problems(page.read_text())
    assert not problems, "\n".join(f"{page.relative_to(ROOT)}:{n}: {message}"
                                   for n, message in problems)


@pytest.mark.parametrize("text, lines", [
    ("Some text:\n- a\n- b\n", [2]),
    ("Some text:\n\n- a\n- b\n", []),
    ("Steps:\n1. one\n2. two\n", [2]),
    ("Text\n| a | b |\n|---|---|\n", [2]),
    ("# Title\n| a | b |\n|---|---|\n| 1 | 2 |\n", []),
    ("# Title\n- a\n", []),
    ("- a\n  continued\n- b\n", []),
    ("- a\n  - nested by two\n", [2]),
    ("- a\n    - nested by four\n        - deeper\n- b\n", []),
    ("- a\n\n    more about a\n\n    - nested\n", []),
    ("```python\ntext\n- not a list\n```\n", []),
    ("| a |\n|---|\n| 1 |\nafter\n- item\n", [5]),
    ("!!! note\n    Text\n    - item\n", [3]),
    ("Text.\n\n<!-- generated -->\n| a |\n|---|\n", []),
])
def test_the_checker_finds_what_will_not_render(text, lines):
    assert [n for n, _ in markdown_problems(text)] == lines


def linked_pages(text, prefix=""):
    """The names of the ``.md`` pages ``text`` links to, under ``prefix``."""
    return set(re.findall(r"\]\(" + re.escape(prefix) + r"([\w-]+\.md)(?:#[\w-]*)?\)", text))


def test_the_readme_and_the_home_page_link_every_page():
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"index.md"}
    readme = linked_pages((ROOT / "README.md").read_text(), "docs/")
    assert "getting-started.md" in readme and "index.md" in readme
    assert not pages - readme, f"README.md links no page {sorted(pages - readme)}"
    home = linked_pages((ROOT / "docs" / "index.md").read_text())
    assert not pages - home, f"docs/index.md links no page {sorted(pages - home)}"


def test_linked_pages_reads_markdown_links():
    assert linked_pages("[a](a.md), [b](b.md#part), [c](docs/c.md) `x.md`") == {"a.md",
                                                                                "b.md"}
    assert linked_pages("[c](docs/c.md#x)", "docs/") == {"c.md"}
