"""Issue 40 ("A lesson that lands"), the parts checked without the model: the slips on screen (a figure's
caption against the figure, the masks' symbols, numbers that fit their cells, Chinese text called Chinese,
no faux italic on CJK, no "seed 00x" on screen, "1 place"), every lesson step naming a view its page draws
and a link that keeps presenter mode, and the ``?focus=`` name checked where it enters."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt

from core.common import i18n
from core.gen import workloads
from core.inside import embeddings
from core.learn import journey, lessons
from core.maths import figures as P
from core.maths import positions as R
from core.plot import palette
from core.web import focus

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _zh_strings():
    for f in sorted((ROOT / "assets" / "i18n").glob("*.json")):
        for key, v in json.loads(f.read_text(encoding="utf-8")).items():
            if isinstance(v, dict) and isinstance(v.get("zh"), str):
                yield key, v["zh"]


def _all_strings():
    for f in sorted((ROOT / "assets" / "i18n").glob("*.json")):
        for key, v in json.loads(f.read_text(encoding="utf-8")).items():
            if isinstance(v, dict):
                for lang in i18n.LANGS:
                    if isinstance(v.get(lang), str):
                        yield key, lang, v[lang]


# ---------------------------------------------------------------------------------------------
# wrong on screen


def _luminance(hex_colour: str) -> float:
    r, g, b = (int(hex_colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _hue_word(hex_colour: str) -> str:
    """A colour as the caption would name it: light/dark grey, dark blue, yellow (the cases the figure uses)."""
    r, g, b = (int(hex_colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    if max(r, g, b) - min(r, g, b) < 16:
        return "light grey" if _luminance(hex_colour) > 0.6 else "dark grey"
    if b > r and b > g:
        return "dark blue" if _luminance(hex_colour) < 0.3 else "blue"
    if r > b and g > b:
        return "yellow"
    return "other"


def test_the_calculators_colour_caption_names_the_figures_colours():
    """The caption under the calculator's weights names the colours the figure draws: 0 and 1 at the ends of
    its colour scale, a masked cell's fill, and the × written on it (it said 0 = white, 1 = dark blue, masked
    dark grey: the figure is cividis, dark blue → yellow, masked light grey)."""
    masked = np.array([[False, False, True]])
    fig = P.weights_figure(np.array([[0.67, 0.33, 0.0]]), masked, "w", ["q"], ["k0", "k1", "k2"], "en")
    scale = fig.data[0].colorscale
    lo, hi = _hue_word(scale[0][1]), _hue_word(scale[-1][1])
    fill = _hue_word(next(t.fillcolor for t in fig.data if getattr(t, "fill", None) == "toself"))
    cap = i18n.t("attention_lab.weights_colours", "en")
    assert f"0 ({lo})" in cap and f"1 ({hi})" in cap and fill in cap, (lo, hi, fill, cap)
    written = [t for t in fig.data if t.type == "scatter" and t.mode == "text"]
    assert written and "×" in written[-1].text  # the × the caption promises, on top of the pattern
    zh = i18n.t("attention_lab.weights_colours", "zh")
    assert "0（深蓝）" in zh and "1（黄）" in zh and "浅灰" in zh


@pytest.mark.parametrize("additive", [False, True])
def test_masks_write_their_symbols_over_the_hatching(additive):
    """Where the tutorial writes × (and −∞ in the additive mask), the figure writes it too, above the hatch
    pattern that used to cover the heatmap's own text."""
    vis = np.tril(np.ones((4, 4), dtype=bool))
    fig = P.mask_figure(vis, "m", "en", additive=additive)
    kinds = [("hatch" if getattr(t, "fill", None) == "toself" else getattr(t, "mode", None) or t.type) for t in fig.data]
    assert kinds.index("text") > kinds.index("hatch"), kinds
    text = fig.data[kinds.index("text")]
    hidden, shown = ("−∞", "0") if additive else ("×", "✓")
    cells = {(x, y): s for x, y, s in zip(text.x, text.y, text.text)}
    for (i, j), v in np.ndenumerate(vis):
        assert cells[(j, i)] == (shown if v else hidden)


def _cell_px(fig, across: int) -> float:
    n = len(fig.data[0].x)
    return (P.PLOT_PX / across - 90) / n


@pytest.mark.parametrize("T", [4, 8, 12, 16])
def test_alibi_numbers_fit_their_cells(T):
    """The ALiBi tab's bias matrix (full width) and its two weight maps (side by side): every number written
    in a cell fits it at the projector's smallest text (0.6 em a character at presenter.MIN_FONT)."""
    from core.web import presenter

    demo = R.alibi_demo(R.ALIBI_HEADS, T, False)
    labels = [str(i) for i in range(T)]
    hidden = R.future_keys(T)
    figs = [(P.matrix_figure(demo.bias[0], "b", labels, labels, "en"), 1),
            (P.weights_figure(demo.plain, hidden, "p", labels, labels, "en", across=2), 2),
            (P.weights_figure(demo.weights[0], hidden, "a", labels, labels, "en", across=2), 2)]
    for fig, across in figs:
        for t in fig.data:
            if t.type == "scatter" and t.mode == "text":
                widest = max(len(s) for s in t.text) * 0.6 * presenter.MIN_FONT
                assert widest <= _cell_px(fig, across), (T, across, max(t.text, key=len))
    if T <= 6:  # where they fit, the numbers are there
        assert any(t.type == "scatter" and t.mode == "text" for t in figs[0][0].data)


def test_zh_pages_call_chinese_sentences_chinese():
    """The tokens page's RAG demo (§5) and the serving lab's chat preset run Chinese sentences on a Chinese
    page: their zh notes say 中文, not 英文."""
    assert all(CJK.search(s) for s in embeddings.rag_sentences("zh"))
    assert "中文句子" in i18n.t("tokens.rag_badge", "zh") and "英文" not in i18n.t("tokens.rag_badge", "zh")
    reqs = workloads.preset("chat", "zh")
    assert reqs and all(CJK.search(r.prompt) for r in reqs)
    why = i18n.t("serving.preset_chat_why", "zh")
    assert "提示词为中文" in why and "提示词为英文" not in why


def test_quiz_zh_divides_the_logits():
    why = i18n.t("quiz.temperature.why", "zh")
    assert "去除" not in why and "除以温度" in why


def test_no_italic_on_cjk():
    """CJK has no italic (a browser slants it by force): no zh string emphasises Chinese with *…*."""
    md = MarkdownIt("commonmark")
    slanted = [k for k, s in _zh_strings()
               if any(CJK.search(e) for e in re.findall(r"<em>(.*?)</em>", md.render(re.sub(r"\{[^{}]*\}", "X", s))))]
    assert slanted == []


def test_no_seed_numbers_on_screen():
    """The tutorials are named by their titles on screen, never by the source folder's "seed 003"."""
    seeds = [(k, lang) for k, lang, s in _all_strings() if re.search(r"\bseed 0\d\d\b|教程 00\d", s, re.IGNORECASE)]
    assert seeds == []


def test_one_place_not_one_places():
    assert journey.src_title(1, "en") == "📍 Where this was computed (1 place in the installed code)"
    assert "3 places" in journey.src_title(3, "en") and "1 处" in journey.src_title(1, "zh")


def test_ids_answer_says_what_the_page_measures():
    """EN 2: the page says neighbouring IDs are "barely more alike"; the lesson says the same (not "no more
    alike than any two") with the page's numbers (checked against the model in the integration tier)."""
    ans = i18n.t("lessons.en.ids.answer", "en")
    assert "no more alike" not in ans and "barely more alike" in ans
    assert "barely more alike" in i18n.t("tokens.iddist_result", "en")


# ---------------------------------------------------------------------------------------------
# steps land at their point; the teacher's links


def _page_names(stem: str) -> set[str]:
    """The views a page file names, and the core.web modules it draws with (the stepper's controls): header
    anchors and element keys given as literals (an f-string key as a pattern, ``*`` for each field)."""
    page = ast.parse((ROOT / "pages" / f"{stem}.py").read_text(encoding="utf-8"))
    web = [ROOT / "core" / "web" / f"{a.name}.py" for n in ast.walk(page) if isinstance(n, ast.ImportFrom) and n.module == "core.web"
           for a in n.names]
    out = set()
    for n in [x for tree in [page, *(ast.parse(f.read_text(encoding="utf-8")) for f in web)] for x in ast.walk(tree)]:
        if isinstance(n, ast.Call):
            for kw in n.keywords:
                if kw.arg in ("anchor", "key") and isinstance(kw.value, ast.Constant):
                    out.add(kw.value.value)
                if kw.arg == "key" and isinstance(kw.value, ast.JoinedStr):  # journey_s{idx}, masks_fig_{key}_grid
                    out.add(re.sub(r"\{[^}]*\}", "*", "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in kw.value.values)))
    return out


@pytest.mark.parametrize(("route", "step"), [(r, s) for r in lessons.ROUTES.values() for s in r.steps],
                         ids=lambda x: getattr(x, "key", ""))
def test_every_step_names_a_view_its_page_draws(route, step):
    """Each step's ``focus`` is a name its page gives an element (an anchor or a key), and a checked name."""
    assert focus.NAME.fullmatch(step.focus)
    names = _page_names(step.page)
    globs = [re.compile(re.escape(n).replace(r"\*", "[a-z0-9_]+")) for n in names]
    assert step.focus in names or any(g.fullmatch(step.focus) for g in globs), (step.page, step.focus, sorted(names))
    assert lessons.params(route, step)["focus"] == step.focus


def test_lesson_links_are_for_the_projector_whatever_the_pages_mode():
    src = (ROOT / "pages" / "lessons.py").read_text(encoding="utf-8")
    assert "lessons.href(route, step, view, present=True)" in src and "presenter.is_on())" not in src


@pytest.mark.parametrize("raw", ["block", "journey_s5", "masks_fig_causal_grid"])
def test_a_view_name_is_kept(raw, monkeypatch):
    monkeypatch.setattr(focus.st, "query_params", {"focus": raw})
    assert focus.wanted() == raw
    s = focus.script(raw)
    assert json.dumps(raw) in s and f".st-key-{raw}" in s


@pytest.mark.parametrize("raw", ["", "Block", "a b", "x\"</script><script>alert(1)</script>", "a" * 60, "#id", "é"])
def test_a_bad_view_name_is_dropped(raw, monkeypatch):
    monkeypatch.setattr(focus.st, "query_params", {"focus": raw})
    assert focus.wanted() is None
    with pytest.raises(ValueError):
        focus.script(raw)


def test_zh_first_step_asks_for_the_sum_only():
    step = lessons.ZH.steps[0]
    assert step.key == "flow" and lessons.ZH.prompt_of(step) == lessons.ZH_FLOW_PROMPT
    assert "<|im_end|>" in i18n.t("lessons.zh.flow.answer", "zh") and "2 + 3 = 5." in i18n.t("lessons.zh.flow.answer", "en")
    assert palette.SEQUENTIAL  # the palette the caption test reads is the one the figures use


# ---------------------------------------------------------------------------------------------
# a student gets lost: previous / next, the architecture tabs in the self-study map


def test_prev_next_follow_the_sidebars_order():
    from core.web import nav, pager

    assert pager.neighbours(nav.STEMS[0]) == (None, nav.STEMS[1])
    assert pager.neighbours(nav.STEMS[-1]) == (nav.STEMS[-2], None)
    walked = [nav.STEMS[0]]
    while (nxt := pager.neighbours(walked[-1])[1]) is not None:
        walked.append(nxt)
    assert tuple(walked) == nav.STEMS


def test_self_study_map_opens_the_architecture_tabs():
    """The norms page's architecture tabs (RNN → Transformer, encoder/decoder, Q/K/V in words, the two norm
    tabs) are each named by the sections they cover, and the tab names are ones the page opens (?tab=)."""
    tabs = dict(lessons.tabs_at("norms"))
    assert set(tabs) == {"vector", "placement", "families", "rnn", "qkv"}
    assert tabs["rnn"] == ("A3",) and tabs["families"] == ("A21",) and tabs["qkv"] == ("A9", "B3.1")
    src = (ROOT / "pages" / "norms.py").read_text(encoding="utf-8")
    assert 'widgets.tabs_url(TABS' in src and all(f'"{t}"' in src for t in tabs)
    for s in lessons.SECTIONS:
        assert all(p in s.pages for p, _ in s.tabs)
    with pytest.raises(ValueError):
        lessons.Section("X1", ("masks",), (("norms", "rnn"),))
