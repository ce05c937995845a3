"""Any model the operator offers, honestly (issue 30): a prompt is cut at the model's own positions, not
only at the app's 4,096-token limit, wherever it enters (trace, generation, the pairs, the command line,
the pages), and said so; a chat-templated prompt keeps the template's end when cut (issue 29 item 9)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.any_model import N_POS

from conftest import ROOT, _smol_tokenizer
from core import __main__ as cli
from core import backends
from core.cause import pair
from core.common.i18n import t
from core.engine import tokens
from core.engine.trace import MAX_TOKENS
from core.gen import generate

LONG = "The quick brown fox jumps over the lazy dog. " * 40  # ~400 tokens


@pytest.fixture(scope="module")
def short_loaded(short_gpt2):
    return backends.load_model(str(short_gpt2))


# ---------------------------------------------------------------------------------------------
# the one rule


def test_prompt_limit_is_the_smaller_of_the_app_and_the_model():
    assert tokens.prompt_limit(MAX_TOKENS, 1024) == (1024, tokens.CUT_MODEL)
    assert tokens.prompt_limit(MAX_TOKENS, 8192) == (MAX_TOKENS, tokens.CUT_APP)
    assert tokens.prompt_limit(MAX_TOKENS, MAX_TOKENS) == (MAX_TOKENS, tokens.CUT_APP)
    assert tokens.prompt_limit(MAX_TOKENS, 0) == (MAX_TOKENS, tokens.CUT_APP)  # a model that states none
    assert tokens.prompt_limit(MAX_TOKENS, None) == (MAX_TOKENS, tokens.CUT_APP)


def test_cut_notice_names_whose_limit_in_both_languages():
    (key, args), = tokens.cut_notice(2819, 1024, tokens.CUT_MODEL)
    assert key == "warn.truncated_model"
    assert "1,024 positions" in t(key, "en", **args) and "2,819" in t(key, "en", **args)
    assert "1,024 个位置" in t(key, "zh", **args)
    (key, _), = tokens.cut_notice(5000, 4096, tokens.CUT_APP)
    assert key == "warn.truncated"
    assert [k for k, _ in tokens.cut_notice(5000, 4096, tokens.CUT_APP, kept_tail=True)] == ["warn.truncated", "warn.truncated_tail"]


def test_encode_cuts_at_the_models_positions():
    tok = _smol_tokenizer()
    enc = tokens.encode(tok, LONG, max_positions=N_POS)
    assert len(enc.ids) == N_POS and enc.truncated_from > N_POS and enc.cut_by == tokens.CUT_MODEL
    assert "at most 64 positions" in enc.notes[-1]
    assert enc.ids == tokens.encode(tok, LONG, max_tokens=10**6).ids[:N_POS]  # the same first tokens
    short = tokens.encode(tok, "Hello there", max_positions=N_POS)
    assert short.truncated_from is None and short.cut_by is None and not short.notes


def test_chat_prompt_cut_keeps_the_templates_end():
    """Issue 29 item 9: cut at the limit, a chat prompt kept <|im_end|> and the assistant header off the end,
    so the "next token" was no longer an assistant's answer. The cut now falls inside the user's text."""
    tok = _smol_tokenizer()
    whole = tokens.encode(tok, LONG, chat=True, max_tokens=10**6)
    tail = tokens.encode(tok, "x", chat=True).ids[-5:]  # <|im_end|> ⏎ <|im_start|> assistant ⏎
    assert tok.decode(tail).strip().endswith("assistant")
    enc = tokens.encode(tok, LONG, chat=True, max_tokens=100)
    assert len(enc.ids) == 100 and enc.truncated_from == len(whole.ids)
    assert enc.ids[-5:] == tail and enc.kept_tail
    assert enc.ids[:20] == whole.ids[:20]  # the system turn and the user header, then the user's text
    assert enc.text.endswith("<|im_start|>assistant\n") and "chat template's end is kept" in enc.notes[-1]
    # a limit the template alone does not fit in: the plain cut, said so without the tail sentence
    tiny = tokens.encode(tok, LONG, chat=True, max_tokens=10)
    assert len(tiny.ids) == 10 and not tiny.kept_tail


# ---------------------------------------------------------------------------------------------
# everywhere a prompt enters


def test_trace_of_a_prompt_longer_than_the_models_positions(short_loaded):
    """GPT-2 with 64 positions and a ~400-token prompt: before, IndexError in the position embedding."""
    assert short_loaded.facts.max_positions == N_POS
    tr = backends.trace(short_loaded, LONG)
    assert tr.n_tokens == N_POS and tr.truncated_from > N_POS
    assert tr.meta["cut_by"] == tokens.CUT_MODEL and not tr.meta["kept_tail"]
    assert any("64 positions" in n for n in tr.notes)
    assert np.isfinite(tr.last_logits).all()


def test_generation_stops_before_the_models_positions(short_loaded):
    rec = generate.generate_record(short_loaded, LONG, 20, None, warmup=False)
    meta = json.loads(str(rec["meta"]))
    assert len(rec["prompt_ids"]) == N_POS and meta["stop_reason"] == "context" and len(rec["token_ids"]) == 1
    assert any("64 positions" in n for n in meta["notes"])
    st = generate.Stepper(short_loaded, rec["prompt_ids"][:N_POS - 3].tolist(), max_steps=50)
    st.run()
    assert st.stop_reason == "context" and len(st.all_ids) == N_POS  # every fed token had a position
    with pytest.raises(ValueError, match="64 positions"):  # ids from elsewhere: refused, not an IndexError
        generate.Stepper(short_loaded, list(range(N_POS + 1)), max_steps=5)


def test_pair_longer_than_the_models_positions_is_refused_with_its_reason():
    tok = _smol_tokenizer()
    with pytest.raises(pair.PairError) as e:
        pair.encode_pair(tok, "one two three four five six", "one two three four five six", max_positions=4)
    assert e.value.code == "too_long_model" and e.value.known
    assert "4 positions" in e.value.text("en") and "4 个位置" in e.value.text("zh")
    with pytest.raises(pair.PairError) as e:
        pair.encode_pair(tok, LONG, LONG)  # the section's own limit keeps its own reason
    assert e.value.code == "too_long"


def test_cli_trace_and_generate_cut_at_the_models_positions(short_gpt2, capsys, tmp_path):
    """`python -m core trace <long text> --model <gpt2>` printed a 77-line traceback."""
    out = tmp_path / "t.npz"
    assert cli.main(["trace", LONG, "--model", str(short_gpt2), "-o", str(out)]) == 0
    io = capsys.readouterr()
    assert "Traceback" not in io.err + io.out and "at most 64 positions" in io.err
    with np.load(out, allow_pickle=False) as z:
        assert z["token_ids"].shape == (N_POS,)
    assert cli.main(["generate", LONG, "--steps", "5", "--model", str(short_gpt2), "-o", str(tmp_path / "g.npz")]) == 0
    io = capsys.readouterr()
    assert "Traceback" not in io.err + io.out and "at most 64 positions" in io.err and "stop: context" in io.out


# ---------------------------------------------------------------------------------------------
# a package that installs (issue 30 item 4)


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_pyproject_lists_every_package_and_reads_the_version_from_core():
    import core

    st = _pyproject()["tool"]["setuptools"]
    found = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "core").rglob("__init__.py"))
    assert sorted(set(st["packages"]) - {"core.assets"}) == found  # a new subpackage must be listed, or the wheel drops it
    assert st["package-dir"]["core.assets"] == "assets" and st["package-data"]["core.assets"] == ["*", "**/*"]
    assert _pyproject()["project"]["dynamic"] == ["version"] and st["dynamic"]["version"] == {"attr": "core.__version__"}
    assert core.__version__.count(".") == 2 and f"## [{core.__version__}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8") and _pyproject()["project"]["license"] == {"text": "MIT"}


def test_assets_are_found_in_the_checkout_or_refused_with_the_way_round(monkeypatch, tmp_path):
    from core.common import paths

    assert paths.assets_dir() == ROOT / "assets"  # a checkout: beside core/ (there is no core/assets here)
    paths.assets_dir.cache_clear()
    monkeypatch.setattr(paths, "CANDIDATES", (tmp_path / "a", tmp_path / "b"))
    try:
        with pytest.raises(paths.AssetsMissingError, match="pip install"):
            paths.assets_dir()
    finally:
        paths.assets_dir.cache_clear()


# ---------------------------------------------------------------------------------------------
# the notebook API (issue 30 item 5)


def test_public_api_names_what_a_researcher_uses_with_docstrings():
    import core

    for name in ("load_model", "trace", "next_tokens", "logit_lens", "layer_detail", "attention", "full_logits", "export_npz",
                 "load_npz", "Trace", "NextTokens", "LensTopK"):
        assert name in core.__all__ and (getattr(core, name).__doc__ or "").strip(), name
