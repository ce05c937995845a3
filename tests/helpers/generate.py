"""Helpers shared by the tiers of test_generate's tests (tests/*/test_generate*.py)."""

from __future__ import annotations

from core.engine import tokens

PROMPT = "Once upon a time"


def _ids(loaded, prompt=PROMPT, chat=False):
    return tokens.encode(loaded.tokenizer, prompt, chat=chat).ids


def _hf_greedy(loaded, ids, n):
    import torch

    with loaded.lock, torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    pad_token_id=loaded.tokenizer.eos_token_id)
    new = out[0, len(ids):].tolist()
    eos = loaded.eos_ids()
    cut = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))  # HF pads after EOS
    return new[:cut]
