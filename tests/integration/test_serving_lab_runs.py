"""The serving lab under a hostile student and a careless operator (issue 39), on tiny random models:
a crafted edit of thousands of rows is refused before the editor applies it; a run is a job that a change
on the page does not restart and that stops once its tab is gone; Gemma-2 runs (through the engine's paged
eager attention) and matches itself alone; the serve-lab command takes a time limit and exits non-zero
when the engine served no request, and says why a lone surrogate cannot be read."""

from __future__ import annotations

import json
import threading

import pytest
from streamlit.elements.widgets import data_editor
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.runtime import Runtime
from streamlit.testing.v1 import AppTest

from conftest import ROOT, _smol_tokenizer, build_tiny
from core import __main__ as cli
from core.gen import serving
from core.web import cache, jobs


def _gemma2(folder):
    import torch
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tok = _smol_tokenizer()
    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, max_position_embeddings=512, architectures=["Gemma2ForCausalLM"])
    Gemma2ForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve_tiny")
    return {"llama": build_tiny("llama", base / "llama"), "gemma2": _gemma2(base / "gemma2")}


@pytest.fixture
def offered(tiny, monkeypatch):
    monkeypatch.setenv("XRAY_MODELS", ",".join(f"{k}={v}" for k, v in tiny.items()))


def _lab(model: str, part: str, workload: str = "long_answers", lang: str = "en") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=model, part=part, workload=workload, lang=lang)
    at.switch_page("pages/serving.py")
    return at.run()


def _table(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_a_crafted_edit_of_2000_rows_is_refused_before_the_editor_applies_it(offered, monkeypatch):
    applied: list[int] = []
    real = data_editor._apply_row_additions

    def spy(df, added, *args, **kw):
        applied.append(len(added))
        return real(df, added, *args, **kw)

    monkeypatch.setattr(data_editor, "_apply_row_additions", spy)
    at = _lab("llama", "batching")
    editor = next(d for d in at.dataframe if "prompt" in d.value.columns)
    rows = [{"id": f"x{i}", "prompt": "Hello " * 50, "max_new_tokens": 4} for i in range(2000)]
    states = at._tree.get_widget_states()
    states.widgets.append(WidgetState(id=editor.proto.id, string_value=json.dumps(
        {"edited_rows": {}, "added_rows": rows, "deleted_rows": []})))
    at._run(states)
    assert not at.exception
    assert max(applied, default=0) <= serving.MAX_REQUESTS  # the 2,000 rows never reached the editor
    assert any("2004 rows" in e.value and str(serving.MAX_REQUESTS) in e.value for e in at.error), [e.value for e in at.error]
    at.run()  # the next run: a fresh editor with the preset, and no error
    assert not at.exception and not at.error
    assert len(next(d for d in at.dataframe if "prompt" in d.value.columns).value) == 4


def _gated(monkeypatch) -> tuple[list, threading.Event]:
    """``serving.run_workload`` counted and held until the returned event is set."""
    calls, gate, real = [], threading.Event(), serving.run_workload

    def held(plain, requests, **kw):
        calls.append(kw)
        gate.wait(120)
        return real(plain, requests, **kw)

    monkeypatch.setattr(serving, "run_workload", held)
    return calls, gate


def test_a_change_during_a_run_applies_to_the_next_run(offered, monkeypatch):
    calls, gate = _gated(monkeypatch)
    at = _lab("llama", "batching")
    at.button(key="serving_go_batching").click()
    threading.Timer(6, gate.set).start()
    with pytest.raises(RuntimeError, match="timed out"):
        at.run(timeout=3)  # the script is stopped mid-run, as a rerun stops it
    at.select_slider(key="serving_page").set_value(16)  # a change while the run goes on
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(calls) == 1 and calls[0]["page_size"] == 32  # one run, with the settings it was started with
    assert any("next run" in c.value for c in at.caption)
    assert set(_table(at, "TTFT (s)")["= alone"]) == {"✓"}


def test_a_run_stops_when_its_tab_is_gone(offered, monkeypatch):
    _, gate = _gated(monkeypatch)
    monkeypatch.setattr(cache, "GONE_GRACE_S", 0.0)
    at = _lab("llama", "batching", lang="zh")  # a workload no other test ran (AppTest's sessions share one id)
    at.button(key="serving_go_batching").click()
    with pytest.raises(RuntimeError, match="timed out"):
        at.run(timeout=3)
    job = at.session_state[jobs.MINE]
    assert job.running
    Runtime._instance.is_active_session.return_value = False  # the tab is closed
    gate.set()
    assert job.done.wait(60)
    assert isinstance(job.error, serving.WorkloadError) and job.error.code == "stopped"


def test_a_failed_run_is_said_once_and_not_restarted_by_a_change(offered, monkeypatch):
    calls = []

    def fails(plain, requests, **kw):
        calls.append(kw)
        raise serving.WorkloadError("timeout", s=300)

    monkeypatch.setattr(serving, "run_workload", fails)
    at = _lab("llama", "blocks", lang="zh")
    at.button(key="serving_go_blocks").click().run()
    assert not at.exception and any("300" in e.value for e in at.error) and len(calls) == 1
    at.select_slider(key="serving_mbt").set_value(128).run()  # a change: no new run, the page asks for a press
    assert not at.exception and not at.error and len(calls) == 1 and at.info


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_gemma2_is_served_and_matches_itself_alone(offered, lang):
    """Gemma-2 has no SDPA attention (its logits are soft-capped): the lab's copy runs the engine's paged
    eager attention, and every request still equals itself generated alone."""
    at = _lab("gemma2", "padded", lang=lang)
    assert not at.exception and not at.error
    at = _lab("gemma2", "batching", lang=lang)
    at.button(key="serving_go_batching").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = _table(at, "TTFT (s)" if lang == "en" else "TTFT（秒）")
    assert len(table) == 4 and set(table.iloc[:, list(table.columns).index("= alone" if lang == "en" else "= 单独生成")]) == {"✓"}


# ---------------------------------------------------------------------------------------------
# the serve-lab command


def _workload(tmp_path, lines) -> str:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(w)


def test_cli_a_lone_surrogate_is_a_sentence(tmp_path, capsys, tiny):
    w = _workload(tmp_path, ['{"id": "a", "prompt": "Hi \\ud800 there", "max_new_tokens": 2}'])
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", w, "-o", str(out), "--model", str(tiny["llama"])]) == 2
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "error: Line 1" in cap.err and "surrogate" in cap.err and not out.exists()


def test_cli_the_time_limit_is_an_option(tmp_path, capsys, tiny):
    w = _workload(tmp_path, ['{"id": "a", "prompt": "Hi", "max_new_tokens": 2}',
                             '{"id": "b", "prompt": "Hi", "max_new_tokens": 2, "arrival_s": 20}'])
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", w, "-o", str(out), "--model", str(tiny["llama"]), "--timeout", "1"]) == 2
    cap = capsys.readouterr()
    assert "did not finish within 1 s" in cap.err and "Traceback" not in cap.err and not out.exists()
    for bad in ("0", "-5", "1.5", "x"):
        assert cli.main(["serve-lab", w, "-o", str(out), "--timeout", bad]) == 2
        assert "--timeout must be a whole number" in capsys.readouterr().err


def test_cli_a_run_that_served_nothing_exits_non_zero(tmp_path, capsys, tiny):
    w = _workload(tmp_path, [json.dumps({"id": f"q{i}", "prompt": "Tell me a long story about the sea " * 8, "max_new_tokens": 8})
                             for i in range(2)])
    out = tmp_path / "r.json"
    code = cli.main(["serve-lab", w, "-o", str(out), "--model", str(tiny["llama"]), "--page-size", "16", "--blocks", "2"])
    cap = capsys.readouterr()
    assert code == 1 and "served none of the 2 requests" in cap.err and "Traceback" not in cap.err
    d = json.loads(out.read_text(encoding="utf-8"))  # the report still says what happened
    assert {r["outcome"] for r in d["requests"]} == {"refused"}
