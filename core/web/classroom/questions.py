"""What a class question holds and how the room's answers are counted (no Streamlit).

A question is computed once, when the teacher opens it, in the teacher's process, and stored whole: students'
devices and the reveal read the store, never the model. Kinds:

* ``next`` — *guess the next token* of the teacher's prompt: the model's top-k (ids, pieces, probabilities)
  from the prompt's trace, and the whole next-token distribution as float32 bytes (the store's blob), so the
  probability and rank of any guess are read off it, with no second forward pass.
* ``mc`` — a multiple-choice question of the quiz (``core.learn.quiz``), by id; each device sees it in its
  own language; the answer is the option's index.
* ``number`` — *guess a number*: the KV cache of the model in use for ``tokens`` tokens in fp16, by the
  calculator's formula (``HeadGeometry.kv_bytes``); answers in MB (10⁶ bytes).
* ``ttft`` — *guess a number*: how many times longer the first token takes (TTFT) when the prompt grows from
  2,000 to 20,000 tokens, read off the prefill curve measured on this server (``core.gen.diagnose.exercise``,
  the Diagnose page's exercise: a fit a + b·n + c·n² through measured medians, carried past the longest input
  measured); answers as a factor.
* ``ablate`` — *which head (of one layer) or which layer's attention matters* for the next token of the teacher's
  prompt: the choices' names and, for each, the KL of the next-token distribution when it alone is zeroed
  (``core.inside.ablation``, the ablation page's own computation), measured once at opening; the answer is the
  choice's index, counted like a multiple choice.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.engine.tokens import readable_tokens
from core.engine.types import HeadGeometry
from core.gen import diagnose as dg
from core.learn import quiz
from core.web.classroom.store import Question, Vote

TOP_K = 10
KINDS = ("next", "mc", "number", "ttft", "ablate")
ABLATE_SCOPES = ("head", "layer")
NUMBER_TOKENS = (1_024, 4_096, 32_768)
FP16 = 2  # bytes per stored value
MB = 1_000_000
_NUMBER = re.compile(r"^\s*(?:[xX×]\s*)?([0-9]+(?:[.,][0-9]+)?|[.,][0-9]+)(?:\s*[eE]\s*([+-]?[0-9]{1,3}))?\s*(?:mb|MB|Mb|[xX×])?\s*$")


# --- opening -------------------------------------------------------------------------------------------

def next_token(tokenizer: Any, prompt: str, traced_text: str, probs: np.ndarray, k: int = TOP_K,
               lens: tuple[Sequence[str], Sequence[float]] | None = None) -> tuple[dict, dict, bytes]:
    """(public, answer, blob) of a *guess the next token* question on a trace's next-token ``probs``.
    ``traced_text``: the exact text the model read (after the chat template); a guess gets a leading space
    when that text does not end in white space (the piece a word continuing it would start with).
    ``lens``: the logit lens at the last position (each layer boundary's best token and its probability),
    for the reveal of how the answer formed."""
    p = np.asarray(probs, dtype=np.float32)
    top = np.argsort(-p, kind="stable")[:k]
    pieces = readable_tokens(tokenizer, top.tolist())
    space = bool(traced_text) and not traced_text[-1].isspace()
    public = {"prompt": prompt[-400:], "cut": len(prompt) > 400}
    answer = {"top": [[int(i), s, float(p[i])] for i, s in zip(top, pieces)], "space": space,
              "lens": [[str(t), float(x)] for t, x in zip(*lens)] if lens is not None else []}
    return public, answer, p.tobytes()


RETRACE_BYTES = 8_000  # a prompt kept whole with a next-token question (for its receipt), at most


def retrace(model: str, prompt: str, chat: bool) -> dict | None:
    """What traces a next-token question's prompt again after its reveal (the receipt of the model's top token,
    ``core.web.receipt``): the model's offered id, the whole prompt, the chat switch; None past RETRACE_BYTES."""
    return {"model": model, "prompt": prompt, "chat": bool(chat)} if len(prompt.encode("utf-8")) <= RETRACE_BYTES else None


def multiple_choice(qid: str) -> tuple[dict, dict, bytes]:
    q = quiz.BY_ID[qid]
    return {"id": q.id, "n": q.n_options}, {"correct": q.correct, "page": q.page}, b""


def kv_number(shape: HeadGeometry, model: str, tokens: int) -> tuple[dict, dict, bytes]:
    """The KV cache of ``shape`` for ``tokens`` tokens, one request, fp16."""
    exact = int(shape.kv_bytes(tokens, FP16, 1))
    public = {"model": model, "tokens": int(tokens), "layers": shape.n_layers, "kv_heads": shape.n_kv_heads,
              "head_dim": shape.dh}
    return public, {"bytes": exact}, b""


def ablate(prompt: str, scope: str, layer: int, names: Sequence[str], kl: Sequence[float]) -> tuple[dict, dict, bytes]:
    """*Which head of ``layer`` (scope "head") or which layer's attention (scope "layer") matters?*, with the
    measured KL (nats) of ablating each choice alone, in the order of ``names``."""
    assert scope in ABLATE_SCOPES and len(names) == len(kl) > 0
    public = {"prompt": prompt[-400:], "cut": len(prompt) > 400, "scope": scope, "layer": int(layer),
              "n": len(names), "names": [str(x) for x in names]}
    return public, {"kl": [float(x) for x in kl]}, b""


@dataclass(frozen=True)
class Ablated:
    """The reveal of an ``ablate`` question: the choice that matters most (largest KL) and how many picked it;
    the room's favourite (most picked; ties: the first) and its rank by KL (1 = matters most)."""

    best: int
    n_best: int
    favourite: int
    favourite_rank: int


def ablated(q: Question, counts: Sequence[int]) -> Ablated:
    kl = np.asarray(q.answer["kl"], dtype=np.float64)
    best, fav = int(np.argmax(kl)), int(np.argmax(counts))
    return Ablated(best, int(counts[best]), fav, int((kl > kl[fav]).sum()) + 1)


def ttft_number(ex: dg.Exercise, model: str, max_positions: int | None) -> tuple[dict, dict, bytes]:
    """The TTFT at EXERCISE_TO over the TTFT at EXERCISE_FROM from the measured curve's fit (kept whole, so the
    reveal says it as the Diagnose page does: ``exercise_of``)."""
    public = {"model": model, "from": dg.EXERCISE_FROM, "to": dg.EXERCISE_TO}
    answer = {"ratio": float(ex.ratio), "fit": dataclasses.asdict(ex.fit), "up_to": int(ex.large.measured_up_to),
              "max_positions": max_positions}
    return public, answer, b""


def exercise_of(q: Question) -> dg.Exercise:
    """The Diagnose page's exercise again, from a ``ttft`` question's stored fit (no TPOT line)."""
    a = q.answer
    fit = dg.Fit(**a["fit"])
    return dg.Exercise(fit, dg.extrapolate(fit, dg.EXERCISE_FROM, a["up_to"], a["max_positions"]),
                       dg.extrapolate(fit, dg.EXERCISE_TO, a["up_to"], a["max_positions"]), None, 0)


def truth(q: Question) -> float:
    """The value a ``number`` (MB) or ``ttft`` (×) question's answers are set against."""
    return q.answer["bytes"] / MB if q.kind == "number" else q.answer["ratio"]


# --- answers -------------------------------------------------------------------------------------------

def parse_number(text: str) -> float | None:
    """A typed number of MB or a factor ("12", "12.5", "1,5", "3e2", "40 MB", "×10", "10x"), or None."""
    m = _NUMBER.match(text or "")
    if not m:
        return None
    try:
        v = float(m.group(1).replace(",", ".") + (f"e{int(m.group(2))}" if m.group(2) else ""))
    except (ValueError, OverflowError):
        return None
    return v if math.isfinite(v) and 0 <= v < 1e12 else None


def valid_answer(q: Question, text: str) -> bool:
    """Whether ``text`` answers ``q`` (checked on the student's side before the vote is sent, and again in the tally)."""
    if q.kind in ("mc", "ablate"):
        return text.isascii() and text.isdigit() and text == str(int(text)) and int(text) < int(q.public.get("n", 0))
    if q.kind in ("number", "ttft"):
        return parse_number(text) is not None
    return bool(text.strip())


@dataclass(frozen=True)
class Guess:
    text: str  # as typed (stripped)
    n: int  # how many typed it
    pieces: tuple[str, ...]  # the tokenizer's split
    first_id: int
    p: float  # the model's probability of the first piece
    rank: int  # 1 = the model's top token


def tally_next(tokenizer: Any, q: Question, votes: Sequence[Vote], probs: np.ndarray) -> list[Guess]:
    """The guesses grouped by text, most typed first, each split by the tokenizer and scored by the stored
    distribution (its first piece: what the model predicts next)."""
    counts = Counter(v.answer.strip() for v in votes if v.answer.strip())
    out = []
    for text, n in counts.items():
        ids = tokenizer.encode((" " if q.answer.get("space") else "") + text, add_special_tokens=False)
        if not ids:
            continue
        first = int(ids[0])
        p = float(probs[first]) if 0 <= first < len(probs) else 0.0
        out.append(Guess(text, n, tuple(readable_tokens(tokenizer, ids)), first, p, int((probs > p).sum()) + 1))
    return sorted(out, key=lambda g: (-g.n, g.rank, g.text))


def hits(guesses: Sequence[Guess], k: int) -> int:
    """How many votes guessed a token in the model's top ``k``."""
    return sum(g.n for g in guesses if g.rank <= k)


def tally_mc(q: Question, votes: Sequence[Vote]) -> list[int]:
    """How many picked each option (``mc``) or choice (``ablate``); anything else is not counted."""
    counts = [0] * int(q.public["n"])
    for v in votes:
        if valid_answer(q, v.answer):
            counts[int(v.answer)] += 1
    return counts


@dataclass(frozen=True)
class Spread:
    n: int
    lo: float
    q1: float
    median: float
    q3: float
    hi: float
    within_2x: int  # answers within a factor of two of the computed value


def tally_number(q: Question, votes: Sequence[Vote]) -> tuple[list[float], Spread | None]:
    """The answers (MB, or a factor) and their spread, beside ``truth(q)``."""
    xs = [x for x in (parse_number(v.answer) for v in votes) if x is not None]
    if not xs:
        return xs, None
    value = truth(q)
    a = np.asarray(xs)
    q1, med, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
    close = int(((a >= value / 2) & (a <= value * 2)).sum())
    return xs, Spread(len(xs), float(a.min()), q1, med, q3, float(a.max()), close)


def csv_bytes(rows: Sequence[tuple[Question, Sequence[Vote]]], names: bool) -> bytes:
    """Every vote of every question, one row each (question number, kind, answer; the nickname only when
    ``names``). A cell is prefixed with ' when a spreadsheet would read it as a formula."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["question", "kind", "answer", *(["name"] if names else [])])
    for q, votes in rows:
        for v in votes:
            w.writerow([q.qid, q.kind, _cell(v.answer), *([_cell(v.nickname)] if names else [])])
    return buf.getvalue().encode("utf-8")


def _cell(text: str) -> str:
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text
