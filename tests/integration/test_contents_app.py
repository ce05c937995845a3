"""A long page's contents (core.web.contents), as the app draws them: one sidebar list of links to the page's
own section anchors, in the reader's language; none on a page without sections, even right after a long one."""

from __future__ import annotations

from conftest import app_run
from core.common import i18n

RESIDUAL = ("residual_h_norms", "residual_h_sub", "residual_h_norm", "residual_h_mlp", "block")


def _lists(at) -> list[str]:
    return [m.value for m in at.sidebar.markdown if "](#" in m.value]


def test_a_long_page_lists_its_sections_and_the_next_page_does_not_inherit_them():
    at = app_run("residual", lang="zh")
    assert not at.exception
    lists = _lists(at)
    assert len(lists) == 1 and lists[0].startswith(f"**{i18n.t('ui.contents', 'zh')}**"), lists
    assert [line.rsplit("(#", 1)[1].rstrip(")") for line in lists[0].splitlines() if line.startswith("- ")] == list(RESIDUAL)
    assert f"[{i18n.t('residual.h_sub', 'zh')}]" in lists[0]  # the header's own words (no Markdown in them)
    at.switch_page("pages/masks.py").run()  # a page of tabs, no sections: no list, none left from the page before
    assert not at.exception and _lists(at) == []
