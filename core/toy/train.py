"""Train the toy transformer on a task whose attention you can read: repeated random segments.

Each sequence is <bos> and random segments (5 … 40 letters), each written twice: ``A A B B …``. The second
copy is predictable only through an induction head (Olsson et al., 2022): a previous-token head in layer 0,
and a layer-1 head that finds the earlier position whose *previous* token is the current one. Neither is
useful without the other, so for the first ``SKIP_STEPS`` steps a quarter of the rows follow a rule only a
previous-token head can exploit (the next letter is a function of the letter two back); then the induction
head forms on the repeats alone. The second copy's loss collapses, the first stays at chance.

Run ``make toy`` (``python -m core.toy.train``, seeded) to rewrite assets/toy/.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from core.common import timing
from core.common.progress import Progress
from core.engine.types import Phrase
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.run import ASSETS, CONFIG_FILE, LOSS_FILE, WEIGHTS_FILE
from core.toy.tokenizer import ByteTokenizer

# The trained toy: SmolLM2's shape (RoPE, RMSNorm, SwiGLU, tied), tiny numbers; 4 heads of 32 dims
# (head_dim > d_model / n_heads, as HF allows), so each head has room for its q·k pattern.
TRAINED_CONFIG = ToyConfig(vocab_size=259, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=32, position="rope",
                           rope_theta=10000.0, norm="rmsnorm", norm_placement="pre", ffn="swiglu", d_ff=128,
                           tied=True, causal=True, max_positions=512)
STEPS, SEED, BATCH, SEQ_LEN, LR = 2000, 1, 32, 96, 5e-3  # seed 0 grows a shifted circuit (attends i+2); seed 1 the textbook one
SEG_MIN, SEG_MAX = 4, 40  # segment lengths seen in training
P_SKIP, SKIP_STEPS = 0.25, 300  # share of rule-following rows, and for how many steps
WARMUP = 100

# Training letters: 64 byte values (the tokenizer still takes any byte, so any prompt runs).
ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ!?"
_rule = random.Random(12345)
SKIP_RULE = {a: _rule.choice(ALPHABET) for a in ALPHABET}  # the letter two back → the next letter

Callback = Callable[[int, float, ToyTransformer], Any]


def make_batch(rng: random.Random, batch: int, seq_len: int, p_skip: float = 0.0, noise: float = 0.2) -> torch.Tensor:
    """[batch, seq_len + 1] token ids: inputs are [:, :-1], next-token targets are [:, 1:].

    The first round(p_skip · batch) rows follow SKIP_RULE (the next letter is a function of the
    letter two back, or random with probability ``noise``); the rest are <bos> + A A B B … with
    random segments of SEG_MIN … SEG_MAX letters (cut at seq_len).
    """
    bos = ByteTokenizer().bos_token_id
    rows = []
    for k in range(batch):
        if k < round(p_skip * batch):
            body = [rng.choice(ALPHABET), rng.choice(ALPHABET)]
            while len(body) < seq_len:
                body.append(SKIP_RULE[body[-2]] if rng.random() >= noise else rng.choice(ALPHABET))
        else:
            body = []
            while len(body) < seq_len:
                seg = [rng.choice(ALPHABET) for _ in range(rng.randint(SEG_MIN, SEG_MAX))]
                body += seg + seg
        rows.append([bos, *body[:seq_len]])
    return torch.tensor(rows, dtype=torch.long)


def train(config: ToyConfig = TRAINED_CONFIG, steps: int = STEPS, seed: int = SEED, callback: Callback | None = None,
          batch: int = BATCH, seq_len: int = SEQ_LEN, lr: float = LR, p_skip: float = P_SKIP,
          skip_steps: int = SKIP_STEPS) -> tuple[ToyTransformer, list[float]]:
    """Train a fresh toy; ``callback(step, loss, model)`` after each step may return False to stop early."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = ToyTransformer(config)
    with torch.no_grad():  # GPT-2-style small init: the default N(0, 1) embedding is far too loud for d=64
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02 if "embed" in name else 0.08)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    # Warm up, then cosine decay to a tenth: a short run still ends on a small step size.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / min(WARMUP, max(1, steps // 10))) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / max(1, steps)))))
    losses: list[float] = []
    model.train()
    for step in range(steps):
        data = make_batch(rng, batch, seq_len, p_skip if step < skip_steps else 0.0)
        logits, _ = model(data[:, :-1])  # [B, T, V]
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), data[:, 1:].reshape(-1))  # [B·T, V] vs [B·T]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.item()))
        if callback is not None and callback(step, losses[-1], model) is False:
            break
    model.eval()
    return model, losses


# ---------------------------------------------------------------------------------------------
# What did it learn?


def repeated_sequence(seg_len: int = 24, copies: int = 2, seed: int = 1) -> list[int]:
    """<bos> + the same random letters ``copies`` times: the induction test sequence."""
    rng = random.Random(seed)
    seg = [rng.choice(ALPHABET) for _ in range(seg_len)]
    return [ByteTokenizer().bos_token_id, *(seg * copies)]


@torch.no_grad()
def induction_report(model: ToyTransformer, seg_len: int = 24, seed: int = 1) -> dict[str, Any]:
    """Loss on each copy of a repeated random sequence, and the best previous-token / induction heads.

    prev-token score of a head: mean weight from position i to i−1. Induction score: mean weight from
    position i (in the second copy) to i − seg_len + 1, the token that *followed* the current token's
    earlier occurrence.
    """
    ids = repeated_sequence(seg_len, 2, seed)
    x = torch.tensor([ids])
    probes: dict[str, Any] = {}
    was_training = model.training
    model.eval()
    logits, _ = model(x, probes=probes)
    model.train(was_training)
    nll = F.cross_entropy(logits[0, :-1], x[0, 1:], reduction="none")  # [T-1]: nll[i] predicts token i+1
    first = nll[1:seg_len].mean().item()  # predicting tokens 2 … seg_len (the first copy, after its first letter)
    second = nll[seg_len + 1 :].mean().item()  # predicting the second copy, after its first letter
    T = len(ids)
    prev, ind = [], []
    for layer, p in enumerate(probes["layers"]):
        w = p["attn_pattern"]  # [H, T, T]
        i = torch.arange(2, T)
        j = torch.arange(seg_len + 1, T)
        for h in range(w.shape[0]):
            prev.append((w[h, i, i - 1].mean().item(), layer, h))
            ind.append((w[h, j, j - seg_len + 1].mean().item(), layer, h))
    (ps, pl, ph), (is_, il, ih) = max(prev), max(ind)
    return {"loss_first_copy": first, "loss_second_copy": second, "seg_len": seg_len,
            "prev_token_head": {"layer": pl, "head": ph, "score": ps},
            "induction_head": {"layer": il, "head": ih, "score": is_}}


def save(model: ToyTransformer, losses: list[float], seconds: float, folder: Path = ASSETS, **info: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tied:
        state.pop("lm_head.weight", None)  # the same tensor as embed_tokens.weight; safetensors refuses shared storage
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(model.cfg.to_dict(), indent=1), encoding="utf-8")
    curve = {"loss": [round(x, 4) for x in losses], "seconds": round(seconds, 1), "torch_threads": torch.get_num_threads(), **info}
    (folder / LOSS_FILE).write_text(json.dumps(curve, indent=1), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# A live run for the page: a fresh toy, a time budget, and a snapshot for the figures now and then

# The budget must hold the default run on a 2-core machine shared with a class's other sessions (the
# measurements behind it: CHANGELOG).
LIVE_STEPS = 300  # the default: the previous-token head forms within it
LIVE_SECONDS = 40.0  # a live run stops after this long, whatever the machine's speed (and says so)
LIVE_EVERY = 10  # a snapshot (loss so far, the last layer's induction pattern) every this many steps


def live_sequence() -> list[int]:
    """The repeated random sequence whose last-layer pattern the live run shows (12 letters, twice)."""
    return repeated_sequence(12, 2, seed=3)


def induction_snapshot(model: ToyTransformer, ids: list[int], second_copy_from: int = 13) -> tuple[int, Any]:
    """(head, its [T, T] weights): the last-layer head that attends most sharply in the second copy."""
    probes: dict[str, Any] = {}
    was_training = model.training
    with torch.no_grad():
        model.eval()
        model(torch.tensor([ids]), probes=probes)
        model.train(was_training)
    w = probes["layers"][-1]["attn_pattern"].numpy()  # [H, T, T] of the last layer
    h = int(max(range(w.shape[0]), key=lambda h_: w[h_][second_copy_from:, :].max(axis=1).mean()))
    return h, w[h]


def train_live(steps: int, seed: int, progress: Progress,
               on_snapshot: Callable[[int, list[float], int, Any], None], seconds: float | None = None) -> dict[str, Any]:
    """Train a fresh toy for up to ``steps`` steps or ``seconds``, whichever comes first.

    ``progress(done, steps, words)`` after every step (steps done, said with the loss: ``toy.live_progress``); ``on_snapshot(step, losses, head, weights)``
    every LIVE_EVERY steps and at the last step (once). Returns the losses, the time taken, ``completed`` (the
    step budget was met) and ``stop`` ("done" or "time": the time budget ran out first), the time of
    each training step alone (``step_timing``, a ``core.common.timing.Timing`` as a dict; the page's
    redraws are counted apart, in ``ui_seconds``) and the induction report of the model reached."""
    seconds = LIVE_SECONDS if seconds is None else float(seconds)
    ids = live_sequence()
    t0 = time.perf_counter()
    losses: list[float] = []
    step_s: list[float] = []
    ui_s = [0.0]
    last = [t0]
    snapped = [-1]  # the step of the last snapshot

    def callback(step: int, loss: float, model: ToyTransformer) -> bool:
        now = time.perf_counter()
        step_s.append(now - last[0])  # the training step alone: data, forward, backward, update
        losses.append(loss)
        progress(step + 1, steps, Phrase("toy.live_progress", {"step": step + 1, "steps": steps, "loss": f"{loss:.3f}"}))
        if step % LIVE_EVERY == 0 or step == steps - 1:
            on_snapshot(step, losses, *induction_snapshot(model, ids))
            snapped[0] = step
        last[0] = time.perf_counter()
        ui_s[0] += last[0] - now
        return last[0] - t0 < seconds

    model, _ = train(steps=steps, seed=seed, callback=callback)
    if snapped[0] != len(losses) - 1:  # a run cut short between snapshots: show where it stopped (once)
        on_snapshot(len(losses) - 1, losses, *induction_snapshot(model, ids))
    done = len(losses) >= steps
    return {"losses": losses, "seconds": time.perf_counter() - t0, "steps_requested": steps, "steps_done": len(losses),
            "completed": done, "stop": "done" if done else "time", "budget_seconds": seconds,
            "step_timing": timing.of(step_s).to_dict() if step_s else None, "ui_seconds": ui_s[0],
            "report": induction_report(model, seg_len=12, seed=3)}


def main() -> None:
    t0 = time.perf_counter()
    model, losses = train()
    seconds = time.perf_counter() - t0
    report = induction_report(model)
    reports = {n: induction_report(model, seg_len=n) for n in (10, 20, 40)}
    save(model, losses, seconds, steps=STEPS, seed=SEED, batch=BATCH, seq_len=SEQ_LEN, lr=LR, p_skip=P_SKIP,
         skip_steps=SKIP_STEPS, report=report, reports_by_length=reports)
    print(f"trained {len(losses)} steps in {seconds:.1f} s on {torch.get_num_threads()} threads; "
          f"loss {losses[0]:.3f} → {sum(losses[-20:]) / 20:.3f}")
    print(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
