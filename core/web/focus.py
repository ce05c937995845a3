"""Open a page at one of its views: a link's ``?focus=<name>`` (every lesson step's link carries one)
scrolls the page so that the view named ``name`` starts at the top of the window, below Streamlit's bar.

A view is named by what the page already gives it: a header's ``anchor`` (``st.header(..., anchor="block")``,
the element's id) or an element's ``key`` (a chart, a widget, a keyed container: Streamlit's class
``st-key-<key>``). The name is checked where it enters (``NAME``: lower-case letters, digits, ``_``), so it
can be neither markup nor a selector of its own; an unknown name finds nothing and the page stays at its top.

The scroll is kept while the page is still drawing (figures above the view arrive late and push it down),
for at most ``HOLD_MS`` from the view's first appearance (a view computed on the server, like a receipt, may
appear long after the page starts: it is waited for up to ``WAIT_MS``), and given up at the reader's first
wheel, touch, key or click: it never fights them.
"""

from __future__ import annotations

import json
import re

import streamlit as st

NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
HOLD_MS = 25_000
WAIT_MS = 300_000  # a view not drawn by then is not waited for
TOP_PX = 72  # where the view's top lands: below Streamlit's header bar (3.75 rem)

_SCRIPT = """<style>#__ID__, .st-key-__ID__ { scroll-margin-top: __TOP__px; }</style><script>
(() => {
  const name = __NAME__, tag = location.pathname + "#" + name;
  if (window.__xrFocus === tag) return;
  window.__xrFocus = tag;
  const start = Date.now();
  let t0 = null, stop = false;
  for (const ev of ["wheel", "touchstart", "keydown", "mousedown"]) window.addEventListener(ev, () => { stop = true; }, {once: true, capture: true, passive: true});
  const find = () => document.getElementById(name) || document.querySelector(".st-key-" + name);
  const tick = () => {
    if (stop || Date.now() - start > __WAIT__ || (t0 !== null && Date.now() - t0 > __HOLD__)) return;
    const el = find();
    if (el && el.getClientRects().length) {
      if (t0 === null) t0 = Date.now();
      const top = el.getBoundingClientRect().top;
      if (top < __TOP__ - 8 || top > __TOP__ + 8) el.scrollIntoView({block: "start"});
    }
    setTimeout(tick, 200);
  };
  tick();
})();
</script>"""


def wanted() -> str | None:
    """The view the URL asks for (``?focus=``), or None (absent, or not a name: dropped)."""
    raw = st.query_params.get("focus")  # spelled out: tests/test_lessons.py reads a page's parameters from its source
    return raw if isinstance(raw, str) and NAME.fullmatch(raw) else None


def script(name: str) -> str:
    """The style and script that bring the view ``name`` (a checked ``NAME``) to the top of the window."""
    if not NAME.fullmatch(name):
        raise ValueError(f"not a view name: {name!r}")
    return (_SCRIPT.replace("__ID__", name).replace("__NAME__", json.dumps(name)).replace("__TOP__", str(TOP_PX))
            .replace("__HOLD__", str(HOLD_MS)).replace("__WAIT__", str(WAIT_MS)))


def apply() -> None:
    """If the URL names a view, scroll to it (the script at the sidebar's foot: no gap in the page's layout)."""
    name = wanted()
    if name is not None:
        st.sidebar.html(script(name), unsafe_allow_javascript=True)
