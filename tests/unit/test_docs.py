"""The trace format's page (docs/trace.md) is written from the site registry, never by hand; every page of
docs/ is linked from the README, and every link between them points at a file that exists."""

from __future__ import annotations

import re

from conftest import ROOT
from core.engine.trace import SITES
from docs import trace_md


def test_trace_page_is_what_the_registry_writes():
    assert (ROOT / "docs" / "trace.md").read_text(encoding="utf-8") == trace_md.render(), (
        "docs/trace.md differs from core.engine.trace.SITES: run .venv/bin/python docs/trace_md.py")


def test_trace_page_has_one_row_per_site():
    page = trace_md.render()
    assert all(f"| `{s.name}` |" in page for s in SITES)


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages and not [p.name for p in pages if f"](docs/{p.name})" not in readme]
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *pages]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
