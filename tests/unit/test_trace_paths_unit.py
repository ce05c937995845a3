"""The fast paths of a trace, each against an independent reference:

* the forward asks for the last position's logits only and the others' top-K / log-sum-exp are
  summarised tile by tile from ``final_hidden`` — unless the model post-processes its head's output
  (Cohere's logit scale), which the tracer must notice and then trace with all logits;
* a layer's attention is derived by replaying its attention sub-layer in bands of query rows, each
  seeing only its live key columns — with many bands, and with a sliding window, it must still equal
  HF eager's ``output_attentions``.
"""

from __future__ import annotations

import floats
import torch

from core import backends
from core.engine import xray

PROMPT = "Attention is computed in bands of query rows; every row must still match eager exactly. 苹果"


def test_last_live_column():
    fill = torch.finfo(torch.float32).min
    causal = torch.triu(torch.full((6, 6), fill), 1)[None, None]
    assert xray._last_live_column(causal[:, :, 0:2]) == 2
    assert xray._last_live_column(causal[:, :, 3:6]) == 6
    dead = causal.clone()
    dead[0, 0, 1] = fill  # a row masked everywhere: eager's answer involves every column
    assert xray._last_live_column(dead[:, :, 0:3]) == 6
    assert xray._last_live_column(torch.ones(1, 1, 2, 5, dtype=torch.bool).tril_()) == 2


def test_kept_keys_and_values_are_the_attention_calls_own(tiny_loaded):
    """The trace's k, v are copied by each attention call into one [L, Hkv, T, dh] array (``kv_into``): the same
    bits as the key and value tensors that call was handed (the old route kept references to them), for every
    tiny family; and every layer's last-row weights were left for the one batched product after the pass."""
    ran = []
    for arch, loaded in tiny_loaded.items():
        ids = backends.encode_prompt(loaded, PROMPT).ids
        tr = backends.trace_ids(loaded, ids)
        if tr.k is None:  # a family whose calls do not run the fast path keeps references (checked elsewhere)
            continue
        x = torch.tensor([list(ids)])
        with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=False, keep_kv=True) as rec:
            loaded.model(input_ids=x, use_cache=False)
        want_k = torch.stack([c["key"][0] for c in rec.calls]).numpy()
        want_v = torch.stack([c["value"][0] for c in rec.calls]).numpy()
        floats.assert_same(tr.k, want_k, f"{arch} k")
        floats.assert_same(tr.v, want_v, f"{arch} v")
        kv = tuple(torch.zeros(tr.k.shape) for _ in "kv")
        with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=False, last_row=True, kv_into=kv) as rec:
            loaded.model(input_ids=x, use_cache=False)
        deferred = [c["last_query"] is not None for c in rec.calls]
        xray.last_rows_of(rec.calls, kv[0])
        assert all(deferred) and all(c["last_row"] is not None for c in rec.calls), arch
        ran.append(arch)
    assert len(ran) >= 3, ran  # llama, qwen2, gpt2 … run SDPA's fast path
