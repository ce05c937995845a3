"""The frame every page shares, drawn once: a page is one function, as in Streamlit's own gallery.

A page file (``pages/<stem>.py``) registers a row in ``core.web.nav.PAGES`` and ends with one line::

    def render(loaded, tr) -> None:   # the arguments follow the row's ``needs``
        ...                           # read widgets → call core → draw

    page.run(render)

``run`` draws the header (``page.<stem>`` and the row's intro), loads what the row ``needs`` (nothing →
``render()``, model → ``render(loaded)``, trace → ``render(tr)``, pair → ``render(loaded, tr)``) or stops
with the reason shown, calls ``render``, and draws the row's ``presenter.sources`` either way. Pass the
trace and the model on as objects (``ui.site(tr, "attn_pattern", layer)``), never a spec or prompt read again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.web import contents, focus, nav, pager, presenter, ui


def row_of(render: Callable[..., Any]) -> nav.Page:
    """The registry row of the page file that defines ``render`` (pages/<stem>.py)."""
    stem = Path(render.__code__.co_filename).stem
    try:
        return nav.BY_STEM[stem]
    except KeyError:
        raise KeyError(f"no page '{stem}' is registered in core.web.nav.PAGES") from None


def run(render: Callable[..., Any]) -> None:
    """Frame the page: header, what it needs (or the reason it cannot load, and stop), ``render``, sources."""
    row = row_of(render)
    focus.apply()  # a link's ?focus= opens the page at that view (a lesson step's)
    ui.header(f"page.{row.stem}", row.intro if row.projector_intro or not presenter.is_on() else None)
    args = _needs(row.needs)
    if args is not None:
        render(*args)
    contents.draw()  # the page's sections, listed in the place app.py kept at the top of the sidebar
    if row.sources:  # drawn also when the page could not load: where to read on stays on the page
        presenter.sources(row.sources)
    pager.prev_next(row.stem)  # drawn either way too: the way on


def _needs(needs: str) -> tuple[Any, ...] | None:
    """What ``render`` receives for ``needs``, or None (the reason already shown) when it cannot be loaded."""
    if needs == "nothing":
        return ()
    if needs == "model":
        loaded = ui.loaded_model()
        return None if loaded is None else (loaded,)
    if needs == "trace":
        tr = ui.current_trace()
        return None if tr is None else (tr,)
    return ui.model_and_trace()
