"""Train the toy transformer on a task whose attention you can read: repeated segments.

Each training sequence is <bos>, a little noise, then one segment (random letters, or a window of a
small bilingual corpus written for this app) repeated until the sequence is full. The first copy of
a random segment cannot be predicted; every later copy can, *if* the model learns the two-step
circuit known as an induction head (Olsson et al., 2022):

1. a previous-token head (layer 0) copies "the token before me" into each position;
2. an induction head (layer 1) looks for an earlier position whose *previous* token equals the
   current token, and predicts what came after it then.

So the loss on the second copy collapses while the first copy stays at chance, and the attention
patterns show a sub-diagonal (previous token) and a diagonal stripe one segment back (induction).

Run ``python -m core.train_toy`` (seeded; about a minute on 2 CPU cores) to rewrite assets/toy/.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from core.toy import ASSETS, CONFIG_FILE, LOSS_FILE, WEIGHTS_FILE, ByteTokenizer, ToyConfig, ToyTransformer

# The trained toy: SmolLM2's shape (RoPE, RMSNorm, SwiGLU, GQA 2:1, tied), tiny numbers.
TRAINED_CONFIG = ToyConfig(vocab_size=259, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, position="rope",
                           rope_theta=10000.0, norm="rmsnorm", norm_placement="pre", ffn="swiglu", d_ff=128,
                           tied=True, causal=True, max_positions=512)
STEPS, SEED, BATCH, SEQ_LEN, LR, P_CORPUS = 2500, 0, 32, 64, 1e-2, 0.2

ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"
CORPUS = """\
The cat sat on the mat. The dog ran to the park. A token is a piece of text; a model reads tokens, not letters.
Attention lets each position look back at earlier positions. The capital of France is Paris.
我喜欢你。你喜欢我。小明把书交给小红。今天天气很好，适合跑步。苹果很好吃。
模型一次只预测一个 Token，然后把它接在输入后面，再预测下一个。
Every layer adds something to the residual stream. Keys and values are cached; queries are not.
"""

Callback = Callable[[int, float, ToyTransformer], Any]


def make_batch(rng: random.Random, batch: int, seq_len: int, p_corpus: float = 0.3) -> torch.Tensor:
    """[batch, seq_len + 1] token ids: inputs are [:, :-1], next-token targets are [:, 1:]."""
    tok = ByteTokenizer()
    corpus = CORPUS.encode("utf-8")
    rows = []
    for _ in range(batch):
        n = rng.randint(6, 20)
        if rng.random() >= p_corpus:
            seg = bytes(rng.choice(ALPHABET) for _ in range(n))
        else:
            start = rng.randrange(0, len(corpus) - n)
            seg = corpus[start : start + n]
        noise = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
        body = noise + seg * (seq_len // n + 2)
        rows.append([tok.bos_token_id, *body[:seq_len]])
    return torch.tensor(rows, dtype=torch.long)


def train(config: ToyConfig = TRAINED_CONFIG, steps: int = STEPS, seed: int = SEED, callback: Callback | None = None,
          batch: int = BATCH, seq_len: int = SEQ_LEN, lr: float = LR,
          p_corpus: float = P_CORPUS) -> tuple[ToyTransformer, list[float]]:
    """Train a fresh toy; ``callback(step, loss, model)`` after each step may return False to stop early."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = ToyTransformer(config)
    with torch.no_grad():  # GPT-2-style small init: the default N(0, 1) embedding is far too loud for d=64
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02 if "embed" in name else 0.08)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    # Warm up, then cosine decay: a short run still ends on a small step size.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + torch.cos(torch.tensor(torch.pi * s / max(1, steps))).item()) + 0.02)
    losses: list[float] = []
    model.train()
    for step in range(steps):
        data = make_batch(rng, batch, seq_len, p_corpus)
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
        w = p["weights"]  # [H, T, T]
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
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tied:
        state.pop("lm_head.weight", None)  # the same tensor as embed_tokens.weight; safetensors refuses shared storage
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(model.cfg.to_dict(), indent=1), encoding="utf-8")
    curve = {"loss": [round(x, 4) for x in losses], "seconds": round(seconds, 1), "torch_threads": torch.get_num_threads(), **info}
    (folder / LOSS_FILE).write_text(json.dumps(curve, indent=1), encoding="utf-8")


def main() -> None:
    t0 = time.perf_counter()
    model, losses = train()
    seconds = time.perf_counter() - t0
    report = induction_report(model)
    save(model, losses, seconds, steps=STEPS, seed=SEED, batch=BATCH, seq_len=SEQ_LEN, lr=LR, p_corpus=P_CORPUS, report=report)
    print(f"trained {len(losses)} steps in {seconds:.1f} s on {torch.get_num_threads()} threads; "
          f"loss {losses[0]:.3f} → {sum(losses[-20:]) / 20:.3f}")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
