"""Accessibility, in one place (WCAG 2.1 AA): the style every page shares and the one script that fixes
what Streamlit's own markup leaves out. app.py calls ``apply`` once per run, before the page.

The style (``CSS``): readable captions and switched-off labels (``palette.INK_SOFT``, ``DISABLED``), a
3-px focus ring (``FOCUS``) on every focusable element, sections as h2 drawn at h3's size, and a figure's
title as text above it (it wraps on a phone).

The script (``SCRIPT``), run in the page on load and on every change (a MutationObserver): ``<html lang>``
follows the language and text in the other script gets its own ``lang``; the sidebar's invalid list markup
gets roles (attributes only: the markup is React's); every figure becomes ``role="figure"`` named by its
title and summary, its SVG ``aria-hidden``, its toolbar still reachable.
"""

from __future__ import annotations

import json

import streamlit as st

from core.plot import palette
from core.web import guards, ui

FOCUS = "#1a4fa0"
DISABLED = "#6b6e78"  # the label of a control switched off (greedy's temperature): dimmer, still 5.1:1 (Streamlit's: 2.29:1)
HTML_LANG = {"en": "en", "zh": "zh-Hans"}  # BCP 47: a screen reader picks its voice by it

CSS = f"""<style>
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p,
[data-testid="stCaptionContainer"] li {{ color: {palette.INK_SOFT} !important; opacity: 1 !important; }}
a:focus-visible, button:focus-visible, [role="button"]:focus-visible, [role="tab"]:focus-visible,
[role="radio"]:focus-visible, [role="switch"]:focus-visible, [role="slider"]:focus-visible,
[role="checkbox"]:focus-visible, [role="option"]:focus-visible, summary:focus-visible,
input:focus-visible, textarea:focus-visible, select:focus-visible,
label:focus-within:has(input[type="radio"]:focus-visible), label:focus-within:has(input[type="checkbox"]:focus-visible) {{
  outline: 3px solid {FOCUS} !important; outline-offset: 2px !important; box-shadow: none !important; }}
[data-testid="stElementContainer"]:has([disabled], [aria-disabled="true"]) [data-testid="stWidgetLabel"] p {{
  color: {DISABLED} !important; }}
[data-testid="stMain"] [data-testid="stHeadingWithActionElements"] h2 {{ font-size: 1.75rem; padding: 0.5rem 0 1rem 0; }}
p.xr-figtitle {{ font-weight: 600; font-size: 1.05rem; margin: 0.4rem 0 0 0; color: {palette.INK}; }}
.xr-figtable {{ overflow-x: auto; max-height: 28rem; overflow-y: auto; }}
.xr-figtable table {{ border-collapse: collapse; font-size: 0.85rem; font-variant-numeric: tabular-nums; }}
.xr-figtable caption {{ text-align: left; font-weight: 600; color: {palette.INK}; }}
.xr-figtable th, .xr-figtable td {{ border: 1px solid {palette.GRID}; padding: 0.15rem 0.4rem; text-align: right; color: {palette.INK}; }}
.xr-figtable th {{ background: #f4f5f7; }}
.xr-sr {{ position: absolute !important; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden;
  clip: rect(0, 0, 0, 0); white-space: nowrap; border: 0; }}
</style>"""

# Installs its observer once per page load (window.__xrA11y); run again (a new language), it only sets the language.
SCRIPT = """<script>
(() => {
  const want = __LANG__;
  window.__xrLang = want; document.documentElement.lang = want;
  if (window.__xrA11y) { window.__xrA11y(); return; }
  const CJK = /[\\u3400-\\u9fff\\uf900-\\ufaff]/, LATIN = /[A-Za-z]{3,}/;
  const fix = () => {
    const lang = window.__xrLang || "en";
    if (document.documentElement.lang !== lang) document.documentElement.lang = lang;
    const nav = document.querySelector('[data-testid="stSidebarNavItems"]');
    if (nav) {
      if (nav.getAttribute("role") !== "none") nav.setAttribute("role", "none");
      for (const sec of nav.children) {
        const head = sec.querySelector(':scope > header');
        if (sec.tagName === "DIV" && sec.getAttribute("role") !== "list") sec.setAttribute("role", "list");
        if (head) {
          if (head.getAttribute("role") !== "none") head.setAttribute("role", "none");
          const name = head.innerText.trim();
          if (name && sec.getAttribute("aria-label") !== name) sec.setAttribute("aria-label", name);
        }
      }
    }
    for (const chart of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
      const box = chart.closest('[data-testid="stElementContainer"]');
      const title = box && box.previousElementSibling ? box.previousElementSibling.querySelector('p.xr-figtitle') : null;
      const label = title ? title.dataset.label : null;
      if (label && chart.getAttribute("aria-label") !== label) { chart.setAttribute("role", "figure"); chart.setAttribute("aria-label", label); }
      // the drawing itself (tick numbers one by one) is hidden from a screen reader; the toolbar's buttons stay
      for (const svg of chart.querySelectorAll('svg.main-svg')) if (svg.getAttribute("aria-hidden") !== "true") svg.setAttribute("aria-hidden", "true");
    }
    // text of the other script gets its own lang: Chinese on an English page, English on a Chinese one
    const other = lang.startsWith("zh") ? "en" : "zh-Hans";
    const test = lang.startsWith("zh") ? (s) => LATIN.test(s) && !CJK.test(s) : (s) => CJK.test(s) && !LATIN.test(s);
    for (const el of document.querySelectorAll('[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li, label p, [role="option"], [data-testid="stWidgetLabel"] p')) {
      const s = el.innerText || "";
      if (s && test(s)) { if (el.getAttribute("lang") !== other) el.setAttribute("lang", other); }
      else if (el.hasAttribute("lang") && el.dataset.xrLang !== "keep") el.removeAttribute("lang");
    }
  };
  let queued = false;
  window.__xrA11y = () => { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; fix(); }); } };
  new MutationObserver(window.__xrA11y).observe(document.body, {childList: true, subtree: true, characterData: true});
  fix();
})();
</script>"""


def apply() -> None:
    """The shared style in the main area and the script at the sidebar's foot (an element of no height
    still takes one gap of the layout; unseen there)."""
    st.html(CSS)  # style only: Streamlit puts it outside the layout (no gap)
    lang = HTML_LANG.get(ui.lang(), "en")
    st.sidebar.html(SCRIPT.replace("__LANG__", json.dumps(lang)) + guards.HISTORY_SCRIPT, unsafe_allow_javascript=True)
