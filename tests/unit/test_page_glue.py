"""What the heads and KV-cache pages computed between their widgets, now in core/ (issue 27), checked against
numbers worked out here by hand; and the trace-keyed cache helpers, memoised by the trace's own key."""

from __future__ import annotations

import numpy as np

import core.backends as backends
from core.common.i18n import t
from core.common.timing import Timing
from core.engine import tokens
from core.engine.types import TOY_ID
from core.gen import generate, kvcalc, report
from core.inside import heads
from core.learn import examples


def _toy():
    return backends.load_model(TOY_ID)


# ---------------------------------------------------------------------------------------------
# the KV-cache page


def test_kv_total_by_hand():
    shape = {p.name: p for p in kvcalc.load_presets()}["SmolLM2-135M"]  # 30 layers, 9 query heads, 3 KV heads, dh 64
    L, H, Hkv, dh = shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.dh
    total = 2 * L * Hkv * dh * 2 * 4096 * 3  # K and V × layers × KV heads × dh × bytes × tokens × requests
    for lang in ("en", "zh"):
        kv = report.kv_total(shape, 4096, 2, 3, lang)
        assert kv.exact == f"{total:,} B" and kv.label == t("kv_cache.total", lang, kind=shape.kind)
        assert kv.formula == t("kv_cache.formula", lang, L=L, kv=Hkv, dh=dh, b=2, t=4096, r=3, total=total)
        assert kv.kinds == ["MHA", f"GQA ({Hkv})", "MQA"]
        assert kv.totals == [2 * L * h * dh * 2 * 4096 * 3 for h in (H, Hkv, 1)]
        assert list(kv.table.columns) == [t(f"kv_cache.col_{c}", lang) for c in ("kind", "kv_heads", "group", "bytes_per_token",
                                                                               "total_bytes", "vs_mha")]
    assert report.kv_total(shape, 4096, 2, 3, "en").value == "270 MiB" and total == 270 * 2**20


def test_the_calculators_choices_put_the_model_in_use_first():
    toy = _toy()
    choices = kvcalc.shape_choices(toy.facts, "this one")
    names = list(choices)
    assert names[0] == "this one" and names[1:] == [p.name for p in kvcalc.load_presets()]
    g = choices["this one"]
    assert (g.n_layers, g.n_heads, g.n_kv_heads, g.dh) == (toy.facts.n_layers, toy.facts.n_heads, toy.facts.n_kv_heads,
                                                           toy.facts.head_dim)
    assert report.current_source(g, "en") == t("kv_cache.current_source", "en", L=g.n_layers, H=g.n_heads, Hkv=g.n_kv_heads, dh=g.dh)


def test_workload_rows_from_the_measured_costs():
    toy = _toy()
    costs, rows = kvcalc.workload_rows(toy.facts, 1e-3, None)  # no decode measured: 0 s per token
    assert costs == kvcalc.Costs(1e-3, 0.0, toy.facts.kv_bytes_per_token(), toy.facts.n_params * toy.facts.value_bytes)
    w = kvcalc.SEED_WORKLOADS[0]
    assert rows[0]["ttft_s"] == w.prompt_tokens * 1e-3
    assert rows[2]["kv_bytes"] == 64 * (8000 + 100) * toy.facts.kv_bytes_per_token()
    assert kvcalc.workload_rows(toy.facts, 1e-3, 2e-2)[1] == kvcalc.simulate(kvcalc.SEED_WORKLOADS, kvcalc.Costs.of_model(toy.facts, 1e-3, 2e-2))


def test_the_comparisons_end_token_and_token_table_read_by_the_tokenizer():
    tok = _toy().tokenizer
    ids = list(b"Hi!")

    def fake(stop: str, n: int) -> generate.CacheComparison:
        return generate.CacheComparison(40, n, ids, ids, Timing((0.1,)), Timing((1.0,)), [0.1] * 3, [0.1] * 3,
                                        [40, 41, 42], [40, 41, 42], stop)

    c = fake("eos", 12)
    assert report.compare_stop_of(c, tok, "en") == report.compare_stop(c, "!", "en")  # the last id, 33, is "!"
    assert report.compare_stop_of(fake("max_steps", 3), tok, "en") is None
    df = report.compare_tokens(c, tok, "zh")
    assert df.loc[t("kv_cache.with", "zh")].tolist() == tokens.token_labels(["H", "i", "!"]) and df.loc["✓"].tolist() == ["✓"] * 3


# ---------------------------------------------------------------------------------------------
# the heads page


def test_the_example_views_sentence_values():
    v = examples.View(query_pos=12, query_positions=(11, 12), target_positions=(6, 7, 8), other_positions=(0, 1), layer=3,
                      head=5, on_target=0.614, on_other=0.05)
    assert v.fill() == {"q": "11, 12", "pos": 12, "l": 3, "h": 5, "t": "61%", "o": "5%", "tp": "6–8", "op": "0–1"}
    assert examples.View(1, (1,), (0,), (), 0, 0, 1.0, 0.0).fill()["op"] == "–"  # the other word not found


def test_view_of_reads_the_example_off_every_layer():
    toy = _toy()
    tr = backends.trace(toy, examples.SHE.prompt)
    weights = [tr.site("attn_pattern", i) for i in range(tr.n_layers)]
    assert examples.view_of(tr, weights.__getitem__) == examples.best_view(tr.tokens, weights)
    assert examples.view_of(tr, lambda layer: None if layer == tr.n_layers - 1 else weights[layer]) is None  # a layer missing
    assert examples.view_of(backends.trace(toy, "another prompt"), weights.__getitem__) is None
    v = examples.view_of(tr, weights.__getitem__)
    rows = np.asarray(weights[v.layer])[:, v.query_pos, :]  # [H, T] from the query, summed as best_view sums: same route → equal
    assert v is not None and v.on_target == float(rows[:, list(v.target_positions)].sum(axis=1)[v.head])


# ---------------------------------------------------------------------------------------------
# the cache helpers take the trace and keep their memo by its key


def test_trace_keyed_helpers_memo_by_the_traces_key(monkeypatch):
    from core.web import cache

    prompt = "a prompt for the trace-keyed memo"
    tr = cache.get_trace(TOY_ID, prompt, False)
    first = cache.atlas(tr)
    np.testing.assert_array_equal(first.entropy, heads.head_atlas_of(cache.site(tr, "attn_pattern", i) for i in range(tr.n_layers)).entropy)
    calls = []
    real = heads.head_atlas_of
    monkeypatch.setattr(heads, "head_atlas_of", lambda layers: calls.append(1) or real(layers))
    cache.store.clear()  # the trace traced again: another object, the same key
    again = cache.get_trace(TOY_ID, prompt, False)
    assert again is not tr and again.key == tr.key
    np.testing.assert_array_equal(cache.atlas(again).entropy, first.entropy)
    assert calls == []  # the memo is the key's, not the object's
    cache.atlas(cache.get_trace(TOY_ID, prompt + " and more", False))
    assert calls == [1]  # another key: computed
