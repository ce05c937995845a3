"""Generation, KV cache and chat template: every number checked against an independent reference
(HF generate, HF's own cache/trace, a hand computation), plus the three pages in both languages."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from floats import allowed_error, assert_f16_as_accurate
from helpers.generate import PROMPT, _hf_greedy, _ids

from conftest import ROOT
from core import __main__ as cli
from core import backends
from core.common.i18n import t
from core.common.numbers import human_bytes
from core.engine import tokens
from core.gen import chat_template, generate, kvcalc
from core.gen import figures as gen_fig


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_stepper_greedy_equals_hf_generate_tiny(tiny_loaded, arch):
    m = tiny_loaded[arch]
    ids = _ids(m, "The cat sat on the mat")
    st = generate.Stepper(m, ids, None, max_steps=10)
    st.run()
    assert st.generated == _hf_greedy(m, ids, 10)
    nc = generate.run_without_cache(m, ids, len(st.generated))
    assert nc.token_ids == st.generated


def test_comparison_said_the_right_way_round_and_why_it_stopped():
    from core.common.timing import Timing
    from core.gen import report

    def fake(w, wo, ids=(5, 6, 2), n=12, stop="eos"):
        return generate.CacheComparison(40, n, list(ids), list(ids), Timing(w), Timing(wo), [0.1] * len(ids), [0.1] * len(ids),
                                        list(range(40, 40 + len(ids))), list(range(40, 40 + len(ids))), stop)

    slow = report.compare_totals(fake((1.968, 1.970, 1.965), (0.933, 0.935, 0.930)), "en")
    assert "2.1× slower" in slow and "0.5" not in slow  # the "0.5× longer", said the right way round
    assert "**The cache was 10.0× faster.**" in report.compare_totals(fake((0.1,), (1.0,)), "en")
    assert "快了 10.0 倍" in report.compare_totals(fake((0.1,), (1.0,)), "zh")
    assert "About the same" in report.compare_totals(fake((0.100,), (0.102,)), "en")
    why = report.compare_stop(fake((0.1,), (1.0,)), "<|im_end|>", "en")
    assert why.startswith("Both runs stopped after 3 of 12 tokens") and "end token <|im_end|> (id 2)" in why
    assert report.compare_stop(fake((0.1,), (1.0,), ids=range(12), stop="max_steps"), "x", "en") is None
    assert fake((0.1, 0.1, 0.3, 0.5), (1.0, 1.0, 1.0)).busy and not fake((0.1,), (1.0,)).busy


def test_stepper_and_journey_loop_stop_alike_at_the_context_window():
    """One stop rule (backends.stop_reason): both loops end where the context window is full."""
    from core.learn import journey

    toy = backends.load_model("toy")
    room = backends.context_room(toy)
    assert room == toy.facts.max_positions == 512
    ids = list(tokens.encode(toy.tokenizer, "abc " * 200).ids)[: room - 5]
    st = generate.Stepper(toy, ids, None, max_steps=50, record_attention=False)
    st.run()
    new, at_eos = journey.greedy_continuation(toy, ids, max_new=50)
    assert new == st.generated
    if st.stop_reason == "context":
        assert not at_eos and len(ids) + len(new) == room
    else:  # the toy chose its end token first: both saw it
        assert st.stop_reason == "eos" and at_eos
    assert backends.stop_reason(toy, 5, 3, room, 50) == "context"
    assert backends.stop_reason(toy, 5, 50, 10, 50) == "max_steps"
    assert backends.stop_reason(toy, 257, 1, 10, 50) == "eos"
    assert backends.stop_reason(toy, 257, 1, 10, 50, stop_at_eos=False) is None


def test_toy_stepper():
    toy = pytest.importorskip("core.toy")
    import torch

    m = toy.wrap(toy.ToyTransformer(toy.ToyConfig(n_layers=2, n_heads=4, n_kv_heads=2)), "random init")
    ids = m.tokenizer.encode("hello")
    st = generate.Stepper(m, ids, None, max_steps=6, stop_at_eos=False)
    st.run()
    assert st.generated == generate.run_without_cache(m, ids, 6).token_ids
    last = st.records[-1]
    f = m.facts
    assert last.kv_tokens == len(ids) + 5
    assert last.kv_bytes == 2 * f.n_layers * f.n_kv_heads * f.head_dim * last.kv_tokens * 4
    # the decode row vs a full forward's last row: float16 storage + the route's float32 error, measured
    # against the toy's float64 twin (the exact answer to float32's eyes)
    x = torch.tensor([st.all_ids[: last.kv_tokens]])
    p32: dict = {}
    p64: dict = {}
    with torch.inference_mode():
        m.model(x, probes=p32)
        copy.deepcopy(m.model).double()(x, probes=p64)
    for layer, (a, b) in enumerate(zip(p32["layers"], p64["layers"])):
        w32, w64 = a["attn_pattern"].numpy(), b["attn_pattern"].numpy()  # [H, T, T]
        assert_f16_as_accurate(last.attn[layer], w64[:, -1], allowed_error(w32, w64), f"L{layer}")  # float32's error on the whole layer


def test_cli_writes_npz(tiny_dirs, tmp_path):
    out = tmp_path / "gen.npz"
    assert cli.generate_main([PROMPT, "--steps", "5", "-o", str(out), "--model", str(tiny_dirs["llama"])]) == 0
    z = np.load(out)
    for key in ("token_ids", "tokens", "kv_tokens", "kv_bytes", "step_seconds", "prefill_seconds", "meta", "prompt_ids"):
        assert key in z.files
    n = len(z["token_ids"])
    assert 1 <= n <= 5 and z["kv_tokens"].shape == (n,) and z["kv_bytes"].shape == (n,) and z["step_seconds"].shape == (n,)
    meta = json.loads(str(z["meta"]))
    f = meta["facts"]
    T = len(z["prompt_ids"])
    assert z["kv_tokens"].tolist() == list(range(T, T + n))
    assert z["kv_bytes"].tolist() == [2 * f["n_layers"] * f["n_kv_heads"] * f["head_dim"] * t * 4 for t in range(T, T + n)]
    assert float(z["step_seconds"][0]) == float(z["prefill_seconds"]) > 0
    assert cli.generate_main(["   ", "--steps", "2", "-o", str(tmp_path / "x.npz"), "--model", str(tiny_dirs["llama"])]) == 2


# ---------------------------------------------------------------------------------------------
# KV calculator


def test_kvcalc_by_hand():
    presets = {p.name: p for p in kvcalc.load_presets()}
    expected = {"SmolLM2-135M": (30, 9, 3, 64), "Qwen2.5-0.5B": (24, 14, 2, 64), "Qwen2.5-7B": (28, 28, 4, 128),
                "Llama-3-8B": (32, 32, 8, 128), "Llama-2-7B": (32, 32, 32, 128)}
    for name, shape in expected.items():
        p = presets[name]
        assert (p.n_layers, p.n_heads, p.n_kv_heads, p.head_dim) == shape
    assert any(p.n_heads == 28 and p.n_kv_heads == 4 and p.group_size == 7 for p in presets.values())
    assert presets["Llama-3-8B"].kv_bytes(1, 2) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert presets["Llama-2-7B"].kv_bytes(4096, 2) == 2 * 2**30  # 2 GiB, the classic figure
    assert presets["Qwen2.5-7B"].kv_bytes(1000, 1, requests=8) == 2 * 28 * 4 * 128 * 1000 * 8
    assert presets["SmolLM2-135M"].kv_bytes_per_token(4) == 46_080
    rows = kvcalc.variant_rows(presets["Qwen2.5-7B"], 1, 2)
    assert [(r["kind"], r["kv_heads"], r["bytes_per_token"]) for r in rows] == [
        ("MHA", 28, 2 * 28 * 28 * 128 * 2), ("GQA (4)", 4, 2 * 28 * 4 * 128 * 2), ("MQA", 1, 2 * 28 * 1 * 128 * 2)]
    assert rows[1]["vs_mha"] == 4 / 28  # (4·X) / (28·X) and 4 / 28: both the correctly rounded 1/7
    assert [r["kind"] for r in kvcalc.variant_rows(presets["Llama-2-7B"], 1, 2)] == ["MHA", "MQA"]
    assert human_bytes(131_072) == "128 KiB" and human_bytes(2 * 2**30) == "2 GiB"


def test_simulate_by_hand():
    costs = kvcalc.Costs(prefill_s_per_token=0.001, decode_s_per_token=0.04, kv_bytes_per_token=46_080, weight_bytes=538_060_032)
    rows = {r["key"]: r for r in kvcalc.simulate(kvcalc.SEED_WORKLOADS, costs)}
    # 8,000 × 0.001, 100 × 0.04, 2,000 × 0.04: one correctly rounded IEEE multiplication each, exactly these
    assert rows["long_in"]["ttft_s"] == 8.0 and rows["long_in"]["decode_s"] == 4.0
    assert rows["long_in"]["time_dominant"] == "prefill" and rows["long_in"]["memory_dominant"] == "weights"
    assert rows["long_out"]["time_dominant"] == "decode" and rows["long_out"]["decode_s"] == 80.0
    assert rows["concurrent"]["kv_bytes"] == 64 * 8100 * 46_080 and rows["concurrent"]["memory_dominant"] == "kv"


def test_chat_without_template():
    toy = pytest.importorskip("core.toy")
    with pytest.raises(chat_template.NoChatTemplateError):
        chat_template.render(toy.ByteTokenizer(), [{"role": "user", "content": "hi"}])


def test_timing_range_in_one_unit():
    """Issue 14: an IQR straddling a second read 'IQR 850.0 ms–1.70 s'."""
    from core.common import timing
    from core.gen import report

    text = report.timing_phrase(timing.of([0.8, 0.85, 1.1, 1.7, 1.8]), "en")
    assert "ms–" not in text and " s–" in text
    assert "ms–" in report.timing_phrase(timing.of([0.02, 0.021, 0.022, 0.03]), "en")


def test_variant_table_numbers_formatted_alike():
    """Issue 14: the MHA/GQA/MQA table showed 283115520 beside a caption's 94,371,840 and 1 beside 0.3333."""
    from core.gen import report

    presets = {p.name: p for p in kvcalc.load_presets()}
    df = report.variant_table(kvcalc.variant_rows(presets["SmolLM2-135M"], 4096, 2), "en")
    cells = df.to_numpy().ravel().tolist()
    assert "283,115,520" in cells and "94,371,840" in cells
    assert {"1.00", "0.33", "0.11"} <= set(cells)


def test_workload_figure_in_the_pages_language_with_level_two_line_names():
    """Issue 14: the zh figure's legend read 'TTFT (prefill)' and 'KV cache'; its names ran together."""
    from core.gen import report

    rows = kvcalc.simulate(kvcalc.SEED_WORKLOADS, kvcalc.Costs(1e-3, 2e-2, 1000, 10**8))
    fig = gen_fig.workloads(report.workload_names(rows, "zh"), rows, "zh")
    assert [d.name for d in fig.data] == [t(k, "zh") for k in ("kv_cache.dom_prefill", "kv_cache.decode_total", "kv_cache.weights", "kv_cache.dom_kv")]
    assert list(fig.data[0].y) == ["长输入<br>短输出", "短输入<br>长输出", "长输入<br>高并发"] and fig.data[0].orientation == "h"
    assert fig.layout.legend.orientation == "h"  # issue 26: a row above the bars, readable at 390 px


def test_timing_lines_are_named_in_the_legend_not_written_over_the_bars():
    """Issue 14: the median / pure-TPOT labels sat on the bars at the line's height, unreadable."""
    fig = gen_fig.timings([0.5, 0.2, 0.25, 0.21], "zh", pure_tpot=0.1)
    assert not fig.layout.annotations and not fig.layout.shapes
    lines = [d for d in fig.data if d.type == "scatter"]
    assert [d.name for d in lines] == [t("generation.median_tpot", "zh"), t("generation.pure_line", "zh")]
    assert lines[0].y[0] == lines[0].y[1] == 210.0 and lines[1].y[0] == 100.0
    assert fig.layout.showlegend and not fig.data[0].showlegend


def test_no_metric_delta_used_as_a_caption():
    """A metric's delta (an arrow) only where something rose or fell: none is switched to 'off' to
    carry a caption (↑ unchanged, ↑ 94,371,840 B, ↑ √d_k = 8.00, ↑ id 2)."""
    offenders = []
    for f in [*(ROOT / "pages").glob("*.py"), *(ROOT / "core" / "web").glob("*.py")]:
        text = f.read_text(encoding="utf-8")
        if 'delta_color="off"' in text or 'delta_arrow="off"' in text:
            offenders.append(f.name)
    assert not offenders, offenders


def test_stepper_tpot_text_says_what_recording_costs():
    """The stepper's caption: its own passes (which recorded attention, said so) beside the one TPOT;
    what recording cost, the right way round — and no verdict at all on a busy machine."""
    from types import SimpleNamespace

    from core.common.timing import Timing
    from core.gen import report

    pure = generate.TpotMeasure(Timing((0.10, 0.10, 0.10)), Timing((0.040, 0.041, 0.040, 0.042)), 30, 8)
    slow = SimpleNamespace(tpots=[0.080, 0.081, 0.082], record_attention=True, ttft=0.2)
    text = report.pure_tpot_text(pure, slow, "en")
    assert text.startswith("**TPOT 40.5 ms (median of 4;") and "2.0× slower (+40.5 ms per step)" in text
    same = SimpleNamespace(tpots=[0.0405, 0.0405, 0.0405], record_attention=True, ttft=0.2)
    assert "no measurable time" in report.pure_tpot_text(pure, same, "en")
    noisy = SimpleNamespace(tpots=[0.02, 0.08, 0.3, 0.9], record_attention=True, ttft=0.2)
    assert "slower" not in report.pure_tpot_text(pure, noisy, "en") and "measurable" not in report.pure_tpot_text(pure, noisy, "en")
    first = SimpleNamespace(tpots=[], record_attention=True, ttft=0.2)
    assert report.timing_text(first, "en").startswith("This run: TTFT 200.0 ms · no decode step yet")


def test_cache_comparison_axis_has_whole_token_ticks():
    fig = gen_fig.cache_compare([37, 38], [0.01, 0.011], [37, 38], [0.02, 0.03], "en")
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == ",d"
    long = gen_fig.cache_compare(list(range(40, 80)), [0.01] * 40, list(range(40, 80)), [0.02] * 40, "en")
    assert long.layout.xaxis.dtick is None and long.layout.xaxis.tickformat == ",d"


def test_message_table_is_capped_in_rows_and_characters():
    """The chat page's editable table can grow without end (rows added, text pasted): the template sees at most
    MAX_MESSAGES rows and MAX_CHARS characters in all, and the flag tells the page to say so."""
    rows = [{"role": "user", "content": "ab"}, {"role": None, "content": float("nan")}]
    assert chat_template.messages_from_records(rows) == ([{"role": "user", "content": "ab"}, {"role": "", "content": ""}], False)
    many = [{"role": "user", "content": "x"}] * (chat_template.MAX_MESSAGES + 5)
    msgs, cut = chat_template.messages_from_records(many)
    assert cut and len(msgs) == chat_template.MAX_MESSAGES
    big = [{"role": "system", "content": "s" * (chat_template.MAX_CHARS - 3)}, {"role": "user", "content": "u" * 10},
           {"role": "user", "content": "more"}]
    msgs, cut = chat_template.messages_from_records(big)
    assert cut and sum(len(m["content"]) for m in msgs) == chat_template.MAX_CHARS
    assert [len(m["content"]) for m in msgs] == [chat_template.MAX_CHARS - 3, 3, 0]
