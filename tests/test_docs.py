"""The documentation's links: every one points at a file of this repository that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())  # code examples may show URLs; they are not links
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(page: Path) -> None:
    for target in links(page):
        assert not re.match(r"[a-z]+:", target), f"{page.name} links outside the repository: {target}"
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
        assert ROOT in path.parents or path == ROOT


def test_every_docs_page_is_linked_from_the_readme_or_another_page() -> None:
    linked = {(page.parent / t.split("#", 1)[0]).resolve() for page in PAGES for t in links(page)}
    orphans = [str(p.relative_to(ROOT)) for p in PAGES[1:] if p.resolve() not in linked]
    assert orphans == []
