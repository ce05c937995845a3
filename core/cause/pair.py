"""Two prompts that differ in one fact, and the one number the section explains.

A *clean* prompt ("The Eiffel Tower is in the city of") and a *corrupted* one ("The Colosseum is in the
city of") prefer different answers; the **logit difference** ``logit(answer) − logit(foil)`` at the last
position measures it, and patching and attribution explain where it comes from. Patching needs both prompts
the same number of tokens, and answer and foil one token each. What arrives from outside is checked here
and refused with a ``PairError`` (an i18n key and its fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.common.i18n import t
from core.common.numbers import softmax, top_k
from core.engine import tokens
from core.engine.types import CodedError, EmptyPromptError, Tokenizer

MAX_TOKENS = 64  # a layer × position sweep is L·T patched runs: keep the pair short
MAX_CHARS = 2_000  # what a text box or a link may carry for one prompt (and what the URL keeps)
MAX_ANSWER_CHARS = 100


@dataclass(frozen=True)
class Preset:
    key: str  # i18n label: cause.preset_<key>
    clean: str
    corrupted: str
    answer: str
    foil: str


PRESETS: tuple[Preset, ...] = (
    Preset("eiffel", "The Eiffel Tower is in the city of", "The Colosseum is in the city of", " Paris", " Rome"),
    # Chinese that SmolLM2's tokenizer can take: both prompts 18 tokens, the answers one digit each. The order of
    # the Chinese numerals (一，二，三 or 三，二，一) decides whether the digits count up ("3") or down ("1");
    # SmolLM2 puts each first (logit differences +3.3 and −2.4). Chinese words as answers (巴黎 is 5 byte pieces)
    # need a model whose vocabulary holds them: the pair after this one, for a Qwen model, say.
    Preset("count_zh", "中文：一，二，三。数字：1，2，", "中文：三，二，一。数字：3，2，", "3", "1"),
    Preset("eiffel_zh", "埃菲尔铁塔位于", "罗马斗兽场位于", "巴黎", "罗马"),
    # the toy was trained to copy repeated segments: after "kqzmw" it predicts what followed "kqzmw" before
    Preset("induction", "kqzmwpkqzmw", "kqzmwrkqzmw", "p", "r"),
)
PRESET_KEYS: tuple[str, ...] = tuple(p.key for p in PRESETS)
FREE = "free"


def preset(key: str) -> Preset | None:
    return next((p for p in PRESETS if p.key == key), None)


class PairError(CodedError, ValueError):
    """Why a pair (or its answers) cannot be used, as an i18n key (``cause.err_<code>``) and its fields."""

    PREFIX = "cause.err_"

    def text(self, lang: str = "en") -> str:
        """The sentence in ``lang`` (``which`` — clean / corrupted / answer / foil — named in that language)."""
        fields = dict(self.params)
        if "which" in fields:
            fields["which"] = t(f"cause.which_{fields['which']}", lang)
            fields["which"] = fields["which"][:1].upper() + fields["which"][1:]
        return t(self.key, lang, **fields)


@dataclass(frozen=True)
class PairText:
    """What the user typed (or a link carried): both prompts and the two answers."""

    clean: str
    corrupted: str
    answer: str
    foil: str

    @classmethod
    def of(cls, p: Preset) -> PairText:
        return cls(p.clean, p.corrupted, p.answer, p.foil)


@dataclass(frozen=True)
class PairTokens:
    """Both prompts as token ids and readable pieces (their counts may differ: see ``same_length``)."""

    ids_clean: tuple[int, ...]
    ids_corrupted: tuple[int, ...]
    tokens_clean: tuple[str, ...]
    tokens_corrupted: tuple[str, ...]

    @property
    def same_length(self) -> bool:
        return len(self.ids_clean) == len(self.ids_corrupted)

    @property
    def n_tokens(self) -> int:
        return len(self.ids_clean)

    def differing(self) -> list[int]:
        """Positions whose tokens differ (over the shorter prompt), then every extra position."""
        n = min(len(self.ids_clean), len(self.ids_corrupted))
        diff = [i for i in range(n) if self.ids_clean[i] != self.ids_corrupted[i]]
        return diff + list(range(n, max(len(self.ids_clean), len(self.ids_corrupted))))

    def require_same_length(self) -> None:
        if not self.same_length:
            raise PairError("counts", n_clean=len(self.ids_clean), n_corrupted=len(self.ids_corrupted))


def _prompt_ids(tokenizer: Tokenizer, text: str, which: str, max_tokens: int, max_positions: int | None = None) -> list[int]:
    if text is None or not text.strip():
        raise PairError(f"empty_{which}")
    if len(text) > MAX_CHARS:
        raise PairError("too_many_chars", which=which, n=len(text), k=MAX_CHARS)
    try:
        enc = tokens.encode(tokenizer, text, chat=False, max_tokens=max_tokens, max_positions=max_positions)
    except EmptyPromptError:
        raise PairError(f"empty_{which}") from None
    if enc.truncated_from:  # a pair is refused, never cut: the patched position must be the same token in both
        code = "too_long_model" if enc.cut_by == tokens.CUT_MODEL else "too_long"
        raise PairError(code, which=which, n=enc.truncated_from, k=len(enc.ids))
    return enc.ids


def encode_pair(tokenizer: Tokenizer, clean: str, corrupted: str, max_tokens: int = MAX_TOKENS,
                max_positions: int | None = None) -> PairTokens:
    """Both prompts as plain text (no chat template), each at most ``max_tokens`` tokens, and at most the
    model's own ``max_positions`` when it has fewer (refused with ``too_long_model``)."""
    a = _prompt_ids(tokenizer, clean, "clean", max_tokens, max_positions)
    b = _prompt_ids(tokenizer, corrupted, "corrupted", max_tokens, max_positions)
    return PairTokens(tuple(a), tuple(b), tuple(tokens.readable_tokens(tokenizer, a)),
                      tuple(tokens.readable_tokens(tokenizer, b)))


def answer_id(tokenizer: Tokenizer, text: str, which: str) -> int:
    """The one token ``text`` is (a leading space counts: " Paris" is not "Paris"); refused otherwise,
    saying how it tokenises."""
    if text is None or text == "":
        raise PairError(f"empty_{which}")
    if len(text) > MAX_ANSWER_CHARS:
        raise PairError("too_many_chars", which=which, n=len(text), k=MAX_ANSWER_CHARS)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    if len(ids) != 1:
        pieces = " | ".join(tokens.visible_tokens(tokenizer, ids)) if ids else "∅"
        raise PairError("answer_tokens", which=which, text=tokens.visible(text), n=len(ids), pieces=pieces)
    return int(ids[0])


@dataclass(frozen=True)
class Answers:
    answer: int
    foil: int
    answer_text: str
    foil_text: str


def answers(tokenizer: Tokenizer, answer: str, foil: str) -> Answers:
    a, f = answer_id(tokenizer, answer, "answer"), answer_id(tokenizer, foil, "foil")
    if a == f:
        raise PairError("same_answer", text=tokens.visible(answer))
    return Answers(a, f, *tokens.readable_tokens(tokenizer, [a, f]))


def fits(tokenizer: Tokenizer, p: Preset) -> bool:
    """Whether example pair ``p`` works with this tokenizer: both prompts the same number of tokens,
    the answer and the foil one token each (the Chinese pair splits into byte pieces on SmolLM2)."""
    try:
        encode_pair(tokenizer, p.clean, p.corrupted).require_same_length()
        answers(tokenizer, p.answer, p.foil)
    except PairError:
        return False
    return True


def alignment(pt: PairTokens) -> list[dict[str, Any]]:
    """One row per position: the clean and the corrupted token there ("" past a prompt's end), and
    whether they are the same token."""
    n = max(len(pt.ids_clean), len(pt.ids_corrupted))
    la, lb = tokens.token_labels(pt.tokens_clean), tokens.token_labels(pt.tokens_corrupted)  # the one label rule
    rows = []
    for i in range(n):
        same = i < min(len(la), len(lb)) and pt.ids_clean[i] == pt.ids_corrupted[i]
        rows.append({"pos": i, "clean": la[i] if i < len(la) else "", "corrupted": lb[i] if i < len(lb) else "", "same": same})
    return rows


CONTEXT = 2  # identical positions kept on each side of a difference in the compact table
MAX_FULL_ROWS = 12  # a pair this short shows every position: the whole table fits without scrolling


@dataclass(frozen=True)
class Elided:
    """A run of identical positions ``start`` … ``stop`` − 1 that the compact table shows as one row."""

    start: int
    stop: int  # exclusive

    @property
    def n(self) -> int:
        return self.stop - self.start

    @property
    def last(self) -> int:
        return self.stop - 1


def compact_alignment(pt: PairTokens, context: int = CONTEXT,
                      max_rows: int = MAX_FULL_ROWS) -> list[dict[str, Any] | Elided]:
    """The alignment as a diff shows it: every position where the prompts differ (``alignment``'s
    ``same`` is False: a different token, or a position past the shorter prompt's end — so with
    unequal counts every extra position stays visible), ``context`` identical positions on each side,
    the last position (where the next token is read), and each run of identical positions left out as
    one ``Elided`` marker, in position order. A pair
    of at most ``max_rows`` positions keeps every row, as does a run of one (its marker would take
    the row it saves)."""
    rows = alignment(pt)
    n = len(rows)
    if n <= max_rows:
        return rows
    marks = [i for i, r in enumerate(rows) if not r["same"]]
    if not marks:
        # Nothing to centre on. Show the start (how both prompts begin) and the end (the last position,
        # where the next token is read), with one marker for the middle rather than every row: a long
        # table of ✓ would only repeat what the marker's count says, that the prompts are identical.
        marks = [0, n - 1]
    keep = [False] * n
    keep[n - 1] = True  # the last position, where the logit difference is read, is always in view
    for m in marks:
        for i in range(max(0, m - context), min(n, m + context + 1)):
            keep[i] = True
    out: list[dict[str, Any] | Elided] = []
    i = 0
    while i < n:
        if keep[i]:
            out.append(rows[i])
            i += 1
            continue
        j = i
        while j < n and not keep[j]:
            j += 1
        out.extend(rows[i:j] if j - i == 1 else [Elided(i, j)])
        i = j
    return out


# ---------------------------------------------------------------------------------------------
# the one number


def logit_diff(logits: Any, answer: int, foil: int) -> np.ndarray | float:
    """logit(answer) − logit(foil) at the last position: ``logits`` [..., V] → [...] (float64 of the
    float32 scores, so the same scores always give the same number)."""
    x = np.asarray(logits)
    d = x[..., answer].astype(np.float64) - x[..., foil].astype(np.float64)
    return float(d) if d.ndim == 0 else d


def top_tokens(tokenizer: Tokenizer, logits: Sequence[float] | np.ndarray, k: int = 8) -> list[dict[str, Any]]:
    """The k highest-scoring next tokens: id, visible text, logit and probability (softmax over all V)."""
    x = np.asarray(logits, dtype=np.float64)
    p = softmax(x)
    ids = top_k(x, k)
    names = tokens.visible_tokens(tokenizer, ids.tolist())
    return [{"id": int(i), "token": n, "logit": float(x[i]), "p": float(p[i])} for i, n in zip(ids, names)]


def compare_rows(tokenizer: Tokenizer, runs: dict[str, Any], by: str, k: int = 8) -> list[dict[str, Any]]:
    """The ``k`` most likely next tokens of run ``by``, with every run's probability of each: rows of
    {"id", "token", <run name>: p …}. ``runs``: name → next-token scores [V]."""
    probs = {name: softmax(v) for name, v in runs.items()}
    ids = top_k(probs[by], k).tolist()
    names = tokens.visible_tokens(tokenizer, ids)
    return [{"id": int(i), "token": n, **{name: float(p[i]) for name, p in probs.items()}} for i, n in zip(ids, names)]


def suggest(tokenizer: Tokenizer, clean_logits: Any, corrupted_logits: Any) -> tuple[str, str] | None:
    """Answer and foil texts from the runs themselves: the clean prompt's most likely next token, and
    the corrupted prompt's (or the clean prompt's runner-up when both agree). None when a token's text
    does not tokenise back to that one token (a piece of a UTF-8 character, say)."""
    a = int(top_k(clean_logits, 1)[0])
    best = int(top_k(corrupted_logits, 1)[0])
    f = best if best != a else int(top_k(clean_logits, 2)[1])
    texts = []
    for i in (a, f):
        s = tokenizer.decode([i])
        ids = tokenizer(s, add_special_tokens=False)["input_ids"]
        if ids != [i]:
            return None
        texts.append(s)
    return texts[0], texts[1]
