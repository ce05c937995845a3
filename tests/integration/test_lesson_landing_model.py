"""Issue 40 ("A lesson that lands") against the embedded model: the Chinese lesson's first step promises what
the journey's loop really writes, the English lesson's token-ID answer quotes what the tokens page measures,
and the lessons page's teacher's notes show every answer, also in presenter mode, with projector links."""

from __future__ import annotations

from conftest import all_text, app_run
from core.common import i18n
from core.engine import tokens
from core.inside import embeddings
from core.learn import journey, lessons


def test_zh_first_step_writes_the_sum_and_stops(smol):
    """The step's prompt, run as the journey page runs it (greedy, up to MAX_NEW tokens): "2 + 3 = 5." and the
    end-of-turn token, as its answer says. On the bare question the model runs on to the limit (why the step asks
    for the sum only)."""
    step = lessons.ZH.steps[0]
    ids = tokens.encode(smol.tokenizer, lessons.ZH.prompt_of(step), chat=lessons.ZH.chat_of(step)).ids
    new, stopped = journey.greedy_continuation(smol, ids, journey.MAX_NEW)
    assert stopped and smol.tokenizer.decode(new[:-1]) == "2 + 3 = 5."
    assert smol.tokenizer.decode(new[-1:]) == "<|im_end|>"
    bare = tokens.encode(smol.tokenizer, lessons.ZH_PROMPT, chat=True).ids
    new, stopped = journey.greedy_continuation(smol, bare, journey.MAX_NEW)
    assert not stopped and len(new) == journey.MAX_NEW and smol.tokenizer.decode(new).startswith("2 + 3 = 5.")


def test_ids_answer_quotes_the_pages_numbers(smol):
    """EN 2's numbers are the tokens page's own study (cache.id_study: id_distance_study on E, seed 0)."""
    s = embeddings.id_distance_study(embeddings.embedding_matrix(smol))
    for lang in i18n.LANGS:
        ans = i18n.t("lessons.en.ids.answer", lang)
        assert f"{s.mean_adjacent:.2f}" in ans and f"{s.mean_random:.2f}" in ans and f"{s.example[2]:.2f}" in ans
        assert f"{len(s.cosine):,}" in ans
    assert 0 < s.mean_adjacent - s.mean_random < 0.05  # barely more alike
    assert s.example[2] < s.mean_random  # 1023 vs 1024: below the random average


def test_teachers_notes_show_every_answer_in_presenter_mode(smol):
    at = app_run("lessons", lang="en", present="1", route="zh", notes="1")
    assert not at.exception
    shown = " ".join(m.value for m in at.markdown)
    for step in lessons.ZH.steps:
        first = i18n.t(f"lessons.zh.{step.key}.answer", "en", **dict.fromkeys(("l", "h", "t", "o"), "?")).split("{")[0][:40]
        if step.view != "she":
            assert first in shown, step.key
    assert not at.expander  # written out, not in an expander a projector hides


def test_links_keep_presenter_mode_whatever_the_pages_mode(smol):
    at = app_run("lessons", lang="en", route="en")
    assert not at.exception
    text = all_text(at)
    assert text.count("present=1") >= len(lessons.EN.steps) and "focus=" in text


def test_home_overview_is_the_traces_numbers_and_links_each_page(smol):
    """The journey's first figure: one box per part of the model, each value read off the trace, each name a link
    to a registered page; the line inside the blocks is the last token's ‖residual‖ after each block."""
    import numpy as np

    from core import trace
    from core.learn import figures as learn_fig
    from core.web import nav

    tr = trace(smol, lessons.EN_PROMPT, chat=True)
    parts = journey.overview(tr, smol.tokenizer, smol.facts.n_heads)
    assert [p.page for p in parts] == ["tokens", "tokens", "context", "heads", "residual", "norms", "logits", "generation"]
    v = {p.key: p.value for p in parts}
    assert v["tokens"] == f"T = {tr.n_tokens}" == "T = 37" and v["embed"] == f"[37, {smol.facts.d_model}]"
    assert v["attn"] == f"{smol.facts.n_layers} × {smol.facts.n_heads}" and v["logits"] == f"[{smol.facts.vocab_size:,}]"
    assert v["next"].startswith("The ")  # SmolLM2 answers "The capital of France is Paris."
    norms = journey.last_token_norms(tr)
    fig = learn_fig.overview_figure([p.key for p in parts], [p.value for p in parts], [f"{p.page}?lang=en" for p in parts],
                                    norms, "t", "n")
    links = [a.text for a in fig.layout.annotations if "href" in (a.text or "")]
    assert len(links) == len(parts) and all(any(f'href="{p.page}?' in a for a in links) for p in parts)
    assert all(p.page in nav.STEMS for p in parts)
    assert np.allclose(fig.data[0].customdata[:, 1], norms)
    at = app_run(None, lang="en")
    assert not at.exception
    text = all_text(at)
    assert "lessons?lang=en" in text and "focus=self_study" in text
