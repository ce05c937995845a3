"""Token embeddings, read straight off the model: the lookup, ID distance vs similarity, a PCA map,
where each token of the (templated) prompt came from, and a crude sentence vector for contrast.

Pure functions over numpy (the model is touched only to read its embedding matrix or run one
forward pass through ``core.tracing``); no Streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from core.common.i18n import t
from core.engine import tokens
from core.engine.types import LoadedModel, Tokenizer

# The token-vs-sentence (RAG) demo: two paraphrases and an unrelated sentence.
RAG_SENTENCES = ("The cat sat on the mat.", "A kitten was resting on the rug.", "Stock prices fell sharply today.")
RAG_SENTENCES_ZH = ("猫坐在垫子上。", "一只小猫在地毯上休息。", "今天股价大幅下跌。")  # the same three, for a Chinese page


def rag_sentences(lang: str) -> tuple[str, ...]:
    """The three sentences of the granularity demo in the page's language (two alike, one not)."""
    return RAG_SENTENCES_ZH if lang == "zh" else RAG_SENTENCES
COMPARE_ROWS = ("id", "emb", "pos", "hidden", "rag")  # the rows of the "which vector is which" table
COMPARE_COLS = ("what", "unit", "role", "not")


def embedding_matrix(loaded: LoadedModel) -> np.ndarray:
    """The input embedding matrix E, [V, d], as a numpy view of the model's weights (no copy).

    Row i is what the model starts from for token ID i: the lookup *is* ``E[i]``.
    """
    w = loaded.model.get_input_embeddings().weight
    with torch.no_grad():
        return w.detach().to("cpu").float().numpy()  # [V, d]


def lookup(E: np.ndarray, ids: np.ndarray | list[int]) -> np.ndarray:
    """Rows of E for the given IDs, [T, d]: the embedding layer is an index, not a computation."""
    return E[np.asarray(ids, dtype=np.int64)]


def lookup_table(row: np.ndarray, traced: np.ndarray, token_id: int, pos: int, ndims: int) -> pd.DataFrame:
    """The first ``ndims`` numbers of E[token_id] above those of trace.embeddings[pos]: the same row."""
    return pd.DataFrame({f"E[{token_id}, :]": row[:ndims], f"trace.embeddings[{pos}, :]": traced[:ndims]}).T


def max_gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a − b|: 0 when the lookup and the trace hold the same row."""
    return float(abs(a - b).max())


def cosine_rows(E: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of E[a[k]] and E[b[k]] for every pair k, [N] float64."""
    x = E[a].astype(np.float64)  # [N, d]
    y = E[b].astype(np.float64)  # [N, d]
    num = (x * y).sum(axis=1)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return num / np.maximum(den, 1e-12)


@dataclass(frozen=True)
class IdDistanceStudy:
    """Random token pairs: how far apart their IDs are vs how similar their embedding rows are."""

    id_a: np.ndarray  # [N] int64
    id_b: np.ndarray  # [N] int64
    distance: np.ndarray  # [N] |id_a − id_b|
    cosine: np.ndarray  # [N]
    pearson: float  # correlation of distance and cosine over the random pairs
    spearman: float  # rank correlation (robust to the long tail of distances)
    mean_random: float  # mean cosine of the random pairs
    mean_adjacent: float  # mean cosine of pairs whose IDs differ by exactly 1
    example: tuple[int, int, float]  # the tutorial's pair, e.g. (1023, 1024, cos)


def _ranks(x: np.ndarray) -> np.ndarray:
    # Average ranks are not needed for a sanity figure; ties among 2000 random distances are rare.
    r = np.empty(len(x), dtype=np.float64)
    r[np.argsort(x, kind="stable")] = np.arange(len(x), dtype=np.float64)
    return r


def id_distance_study(E: np.ndarray, n_pairs: int = 2000, seed: int = 0, example: tuple[int, int] = (1023, 1024)) -> IdDistanceStudy:
    """Sample ``n_pairs`` random distinct pairs and ``n_pairs`` adjacent pairs (i, i+1) of token IDs."""
    V = E.shape[0]
    rng = np.random.default_rng(seed)
    a = rng.integers(0, V, n_pairs)
    b = rng.integers(0, V, n_pairs)
    b = np.where(a == b, (b + 1) % V, b)  # a token with itself would be a trivial 1.0
    cos = cosine_rows(E, a, b)
    dist = np.abs(a - b).astype(np.int64)
    adj = rng.integers(0, V - 1, n_pairs)
    cos_adj = cosine_rows(E, adj, adj + 1)
    ea, eb = (min(example[0], V - 1), min(example[1], V - 1))
    ex = float(cosine_rows(E, np.array([ea]), np.array([eb]))[0])
    return IdDistanceStudy(
        id_a=a.astype(np.int64),
        id_b=b.astype(np.int64),
        distance=dist,
        cosine=cos,
        pearson=float(np.corrcoef(dist, cos)[0, 1]),
        spearman=float(np.corrcoef(_ranks(dist), _ranks(cos))[0, 1]),
        mean_random=float(cos.mean()),
        mean_adjacent=float(cos_adj.mean()),
        example=(ea, eb, ex),
    )


def id_study_args(s: IdDistanceStudy, tokenizer: Tokenizer) -> dict[str, Any]:
    """The fields of tokens.iddist_result: the correlations, the mean cosines and the example pair."""
    ta, tb = tokens.visible_tokens(tokenizer, [s.example[0], s.example[1]])
    return {"n": len(s.cosine), "r": s.pearson, "rho": s.spearman, "rand": s.mean_random, "adj": s.mean_adjacent,
            "a": s.example[0], "b": s.example[1], "ta": ta, "tb": tb, "c": s.example[2]}


@dataclass(frozen=True)
class Pca2:
    coords: np.ndarray  # [N, 2] projections on the first two principal axes
    explained: np.ndarray  # [2] share of the total variance each axis explains
    components: np.ndarray  # [2, d] the axes themselves (unit vectors)


def pca2(X: np.ndarray) -> Pca2:
    """A 2-D PCA by SVD of the centred rows (numpy only). Signs are fixed so that the largest
    |loading| of each axis is positive, which makes the map stable between runs."""
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(axis=0, keepdims=True)  # [N, d]
    _U, S, Vt = np.linalg.svd(Xc, full_matrices=False)  # Xc = U diag(S) Vt
    k = min(2, Vt.shape[0])
    comps = Vt[:k].copy()  # [k, d]
    for j in range(k):
        if comps[j, np.argmax(np.abs(comps[j]))] < 0:
            comps[j] *= -1
    coords = Xc @ comps.T  # [N, k]
    total = float((S**2).sum())
    explained = (S[:k] ** 2) / total if total > 0 else np.zeros(k)
    if k < 2:  # fewer than two distinct rows: pad, so callers always get two columns
        coords = np.pad(coords, ((0, 0), (0, 2 - k)))
        explained = np.pad(explained, (0, 2 - k))
        comps = np.pad(comps, ((0, 2 - k), (0, 0)))
    return Pca2(coords, explained, comps)


@dataclass(frozen=True)
class WordVector:
    word: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    vector: np.ndarray  # [d]: the row itself, or the mean of the rows when the word is several tokens


def word_vectors(loaded: LoadedModel, E: np.ndarray, words: list[str]) -> list[WordVector]:
    """Each word's embedding. A word split into several tokens gets the mean of its rows (said in
    the UI): the model itself never sees such a mean, it sees the rows one by one."""
    out = []
    for w in words:
        if not w.strip():
            continue
        ids = loaded.tokenizer(w, add_special_tokens=False)["input_ids"]
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        if not ids:
            continue
        ids = [int(i) for i in ids if 0 <= int(i) < E.shape[0]]
        pieces = tokens.sequence_labels(loaded.tokenizer, ids)  # the one label rule: 苹⟨E8⟩ + 苹⟨8B⟩ …
        out.append(WordVector(w, tuple(ids), tuple(pieces), E[ids].astype(np.float64).mean(axis=0)))
    return out


def pca_caption(words: list[str], pieces: list[str], lang: str) -> str:
    """The note under the PCA map, naming the words that are several tokens (their point is a mean)."""
    multi = [f"{w} → {p}" for w, p in zip(words, pieces) if " + " in p]
    return t("tokens.pca_note", lang) + (" " + t("tokens.pca_multi", lang, items="; ".join(multi)) if multi else "")


def parse_words(text: str, limit: int = 40) -> list[str]:
    """Comma/newline-separated words; a leading space is kept when the user typed one (' cat' and
    'cat' are different tokens), surrounding newlines and empty items are dropped."""
    items = [w.strip("\n\r\t") for chunk in text.split("\n") for w in chunk.split(",")]
    seen: list[str] = []
    for w in items:
        w = w if w.strip() else ""
        if w and w not in seen:
            seen.append(w)
    return seen[:limit]


def token_sources(tokenizer: Tokenizer, text: str, prompt: str, ids: list[int], chat: bool) -> list[str]:
    """For each token, who wrote it — the one rule the chips and their legend follow: "user" (its
    characters lie inside the user's prompt), "template" (added by the chat template), "special" (a
    control token the template or the tokenizer added, such as <|im_start|>) or "typed_special" (a
    control token the user typed: with the template off the text is read as it is, so a typed
    ``<|im_end|>`` is the real token, and it is the user's).

    With the template on, the user's message is read as text (``tokens.encode`` splits a special token
    typed in it), so every token of the message is the user's: the template's text before and after the
    message is matched at both ends of ``ids``. Otherwise (the template's parts not found, or a cut
    prompt) the tokenizer's character offsets of ``text`` say it.
    """
    special = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    if not chat or not tokens.has_chat_template(tokenizer):
        return _plain_sources(tokenizer, text, ids, special)
    by_parts = _sources_by_parts(tokenizer, ids, special)
    if by_parts is not None:
        return by_parts
    start = text.rfind(prompt)  # the user's message sits after the system preamble
    end = start + len(prompt)
    offsets = _offsets(tokenizer, text, False)  # None (a slow tokenizer): we cannot tell, so say "template" for none
    out = []
    for k, i in enumerate(ids):
        if i in special:
            out.append("special")
        elif offsets is None or start < 0 or k >= len(offsets):
            out.append("user")
        else:
            s, e = offsets[k]
            out.append("user" if (s >= start and e <= end and e > s) else "template")
    return out


def _offsets(tokenizer: Tokenizer, text: str, add_special: bool) -> list | None:
    """The tokenizer's character offsets of ``text`` (one row), or None where it gives none (a slow tokenizer)."""
    try:
        offsets = tokenizer(text, add_special_tokens=add_special, return_offsets_mapping=True)["offset_mapping"]
    except Exception:
        return None
    if offsets and isinstance(offsets[0], list) and offsets[0] and isinstance(offsets[0][0], (list, tuple)):
        offsets = offsets[0]
    return offsets


def _sources_by_parts(tokenizer: Tokenizer, ids: list[int], special: set[int]) -> list[str] | None:
    """Sources from the template's own ids before and after the message (None when ``ids`` does not
    start and end with them, e.g. a prompt cut without its tail)."""
    parts = tokens._template_parts(tokenizer)
    if parts is None:
        return None
    head, tail = (tokens._ids(tokenizer, p, False) for p in parts)
    if len(ids) < len(head) + len(tail) or ids[: len(head)] != head or ids[len(ids) - len(tail):] != tail:
        return None

    def tpl(i: int) -> str:
        return "special" if i in special else "template"

    return [*map(tpl, head), *(["user"] * (len(ids) - len(head) - len(tail))), *map(tpl, tail)]


def _plain_sources(tokenizer: Tokenizer, text: str, ids: list[int], special: set[int]) -> list[str]:
    """The template off: every token is the user's; a control token among them is one the user typed
    (its characters lie in the text) or one the tokenizer added (a BOS: no characters)."""
    if not any(i in special for i in ids):
        return ["user"] * len(ids)
    offsets = _offsets(tokenizer, text, True)  # None (a slow tokenizer): a control token is the tokenizer's
    out = []
    for k, i in enumerate(ids):
        if i not in special:
            out.append("user")
        elif offsets is not None and k < len(offsets) and offsets[k][1] > offsets[k][0]:
            out.append("typed_special")
        else:
            out.append("special")
    return out


def source_counts(sources: list[str]) -> dict[str, int]:
    """The fields of tokens.chips_legend: how many tokens in all, and from the user, the template, specials."""
    typed = sources.count("typed_special")  # the user's, and a control token (red) too
    return {"n": len(sources), "user": sources.count("user") + typed, "tpl": sources.count("template"),
            "special": sources.count("special") + typed}


def compare_table(lang: str) -> pd.DataFrame:
    """Token ID, token embedding, position, hidden state, RAG vector: what each is, per what, what for, what not."""
    return pd.DataFrame([[t(f"tokens.cmp_{r}_{c}", lang) for c in COMPARE_COLS] for r in COMPARE_ROWS],
                        columns=[t(f"tokens.cmp_col_{c}", lang) for c in COMPARE_COLS])


def mean_pooled(hidden: np.ndarray) -> np.ndarray:
    """A sentence vector the crude way: the mean of the final hidden states over positions, [d].

    Real retrieval (RAG) embedding models are trained for this with contrastive objectives; a
    decoder's mean pool only illustrates the *granularity*: one vector per text, not per token.
    """
    return np.asarray(hidden, dtype=np.float64).mean(axis=0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))


def similarity_table(texts: Sequence[str], vectors: Sequence[np.ndarray]) -> pd.DataFrame:
    """Cosine similarity of every pair of ``vectors``, rows and columns named by their ``texts``."""
    return pd.DataFrame([[cosine(a, b) for b in vectors] for a in vectors], index=list(texts), columns=list(texts))


def find_subsequence(ids: list[int] | np.ndarray, sub: list[int]) -> list[int]:
    """End positions (index of the last token) of every occurrence of ``sub`` in ``ids``."""
    ids = [int(i) for i in ids]
    n = len(sub)
    if n == 0:
        return []
    return [k + n - 1 for k in range(len(ids) - n + 1) if ids[k : k + n] == list(sub)]


def context_similarity(resid_a: np.ndarray, pos_a: int, resid_b: np.ndarray, pos_b: int) -> np.ndarray:
    """Cosine similarity, layer by layer, of one position's residual stream in two traces.

    resid_* : [L+1, T, d] → [L+1]. Entry 0 compares the embedding rows: 1 when the two
    positions hold the same token ID (the same row of E, and RoPE adds nothing to the stream), up to the
    float64 rounding of the dot product and the square roots (a few units in the 16th digit).
    """
    x = resid_a[:, pos_a, :].astype(np.float64)  # [L+1, d]
    y = resid_b[:, pos_b, :].astype(np.float64)  # [L+1, d]
    num = (x * y).sum(axis=1)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return num / np.maximum(den, 1e-12)


def context_baseline(resid_a: np.ndarray, pos_a: int, resid_b: np.ndarray, skip_b: int) -> np.ndarray:
    """For scale: the mean cosine, per layer, of position ``pos_a`` in A with every *other*
    position of B (other tokens). Residual streams share large common directions, so raw cosines
    are high everywhere; this curve says what "unrelated" looks like. [L+1], NaN if B has one token."""
    x = resid_a[:, pos_a, :].astype(np.float64)  # [L+1, d]
    others = [j for j in range(resid_b.shape[1]) if j != skip_b]
    if not others:
        return np.full(resid_a.shape[0], np.nan)
    y = resid_b[:, others, :].astype(np.float64)  # [L+1, T', d]
    num = np.einsum("ld,ltd->lt", x, y)
    den = np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(y, axis=2)
    return (num / np.maximum(den, 1e-12)).mean(axis=1)


# Example pairs for the context page: (prompt A, prompt B, the shared word). The word is located in
# A (first occurrence) and B (last occurrence) by its token IDs, ending on its LAST token: 苹 is three
# byte tokens in SmolLM2, and 果 is the piece that has seen the whole word.
CONTEXT_PAIRS: dict[str, tuple[str, str, str]] = {
    "zh_one": ("苹果很好吃。苹果发布了新系统。", "苹果很好吃。苹果发布了新系统。", "苹果"),
    "zh_ctx": ("在水果店里，苹果很好吃。", "在发布会上，苹果发布了新系统。", "苹果"),
    "zh_start": ("苹果很好吃。", "苹果发布了新系统。", "苹果"),
    "en": ("I ate an apple pie.", "I bought an apple phone.", " apple"),
}


def word_ids(tokenizer: Tokenizer, word: str) -> list[int]:
    """The word's token IDs; [] when this tokenizer cannot say (the caller then falls back)."""
    try:
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    except Exception:  # e.g. a toy tokenizer without the HF call signature
        return []
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


def default_positions(ids_a: Any, ids_b: Any, word: list[int]) -> tuple[int, int]:
    """Where to compare by default: the word's first occurrence in A and its last in B (so one
    prompt containing the word twice compares its two occurrences), each at the word's last token.
    Falls back to the last position of each prompt when the word is not found."""
    ends_a = find_subsequence(ids_a, word)
    ends_b = find_subsequence(ids_b, word)
    a = ends_a[0] if ends_a else len(ids_a) - 1
    b = ends_b[-1] if ends_b else len(ids_b) - 1
    return int(a), int(b)


def same_prefix(ids_a: Any, pos_a: int, ids_b: Any, pos_b: int) -> bool:
    """True when both positions see exactly the same tokens (causal attention: positions 0 … pos)."""
    return pos_a == pos_b and [int(i) for i in ids_a[: pos_a + 1]] == [int(i) for i in ids_b[: pos_b + 1]]


def pick_label(pieces: Any, ids: Any, i: int) -> str:
    """A position picker's option: '3·苹 (id 12345)'."""
    return f"{tokens.position_label(pieces, i)} (id {int(ids[i])})"


def comparable(resid_a: np.ndarray, resid_b: np.ndarray) -> bool:
    """Whether two traces have the same number of layer boundaries (the same model)."""
    return resid_a.shape[0] == resid_b.shape[0]


@dataclass(frozen=True)
class ContextComparison:
    """One position of prompt A beside one of prompt B, layer by layer."""

    sim: np.ndarray  # [L+1] cosine of the two residual streams
    base: np.ndarray  # [L+1] the same position of A against B's other positions (what "unrelated" looks like)
    id_a: int
    id_b: int
    same_prefix: bool  # both positions see exactly the same tokens: the streams stay identical

    @property
    def same_id(self) -> bool:
        return self.id_a == self.id_b

    @property
    def weakest_layer(self) -> int:
        """The layer boundary where the two streams are least alike."""
        return int(self.sim.argmin())


def compare_contexts(ids_a: Any, resid_a: np.ndarray, pos_a: int, ids_b: Any, resid_b: np.ndarray, pos_b: int) -> ContextComparison:
    return ContextComparison(
        sim=context_similarity(resid_a, pos_a, resid_b, pos_b),
        base=context_baseline(resid_a, pos_a, resid_b, pos_b),
        id_a=int(ids_a[pos_a]),
        id_b=int(ids_b[pos_b]),
        same_prefix=same_prefix(ids_a, pos_a, ids_b, pos_b),
    )


def follow_pairs(pos_a: int, pos_b: int, n: int) -> list[tuple[int, int]]:
    """The ``n`` aligned position pairs that end at (pos_a, pos_b) — the tokens of one word, e.g. 苹果's
    four in SmolLM2 (苹 is three byte tokens, then 果) — shortened where a prompt has fewer tokens before."""
    n = max(1, min(int(n), pos_a + 1, pos_b + 1))
    return [(pos_a - n + 1 + j, pos_b - n + 1 + j) for j in range(n)]


def compare_word(ids_a: Any, resid_a: np.ndarray, ids_b: Any, resid_b: np.ndarray,
                 pairs: Sequence[tuple[int, int]]) -> list[ContextComparison]:
    """``compare_contexts`` for each aligned pair: every token of the word, not only its last."""
    return [compare_contexts(ids_a, resid_a, i, ids_b, resid_b, j) for i, j in pairs]


def word_table(comps: Sequence[ContextComparison], labels_a: Sequence[str], labels_b: Sequence[str], lang: str) -> pd.DataFrame:
    """One row per followed token: its label in A and in B, the similarity of the embeddings (layer
    boundary 0), the lowest similarity and where, and the similarity leaving the last block."""
    return pd.DataFrame({
        t("context.col_tok_a", lang): list(labels_a),
        t("context.col_tok_b", lang): list(labels_b),
        t("context.col_embed", lang): [float(c.sim[0]) for c in comps],
        t("context.col_min", lang): [float(c.sim.min()) for c in comps],
        t("context.col_min_at", lang): [c.weakest_layer for c in comps],
        t("context.col_last", lang): [float(c.sim[-1]) for c in comps],
    })


def context_table(c: ContextComparison, lang: str) -> pd.DataFrame:
    """Layer, similarity and baseline, one row per layer boundary, in ``lang``."""
    return pd.DataFrame({t("context.col_layer", lang): range(len(c.sim)), t("context.col_sim", lang): c.sim,
                         t("context.col_base", lang): c.base})


# ---------------------------------------------------------------------------------------------
# The lookup as an exercise (seed 003's objective 2): normal and abnormal inputs, their IDs and rows,
# and a regression check that reports the first position where two inputs part.

PROBE_INPUTS = (  # (kind, text): what a test of the lookup should try, beside an ordinary sentence
    ("normal", "Hello world"),
    ("empty", ""),
    ("space", " "),
    ("emoji", "🙂"),
    ("rare_cjk", "𪚥"),  # U+2A6A5, outside the BMP: four UTF-8 bytes
    ("control", "\x07"),  # BEL
    ("long_word", "pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("twice", "Hello world Hello world"),
)
REGRESSION_PAIR = ("Hello world", "Hello  world")  # one extra space


def text_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The IDs of ``text`` alone (no special tokens added): what the embedding layer receives for it."""
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def shown_text(text: str) -> str:
    """``text`` as a Python literal, so an empty string, a space or a control character can be seen."""
    return ascii(text) if any(not c.isprintable() for c in text) else repr(text)


def probe_table(tokenizer: Tokenizer, E: np.ndarray, inputs: Sequence[tuple[str, str]] = PROBE_INPUTS, n_ids: int = 8) -> pd.DataFrame:
    """One row per input: its IDs (the first ``n_ids``), how many, and E[id]'s first value and norm for
    the first ID (an empty input has no row at all: nothing to look up)."""
    rows = []
    for kind, text in inputs:
        ids = text_ids(tokenizer, text)
        first = E[ids[0]] if ids else None
        rows.append({"kind": kind, "text": shown_text(text), "chars": len(text), "n_ids": len(ids),
                     "ids": str(ids[:n_ids])[:-1] + (", …]" if len(ids) > n_ids else "]") if ids else "[]",
                     "E[id0][0]": float(first[0]) if first is not None else float("nan"),
                     "‖E[id0]‖": float(np.linalg.norm(first.astype(np.float64))) if first is not None else float("nan")})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Deviation:
    """Where two inputs' lookups first part: ``position`` (None when they are identical), the IDs there
    (None past an input's end), and the largest |row_a − row_b| there (None when a row is missing)."""

    position: int | None
    id_a: int | None
    id_b: int | None
    row_gap: float | None
    n_a: int
    n_b: int


def first_deviation(ids_a: Sequence[int], rows_a: np.ndarray, ids_b: Sequence[int], rows_b: np.ndarray) -> Deviation:
    """The first position at which the IDs or the embedding rows of two inputs differ (a regression check:
    the same text must give the same IDs and exactly the same rows)."""
    n_a, n_b = len(ids_a), len(ids_b)
    for p in range(max(n_a, n_b)):
        a = int(ids_a[p]) if p < n_a else None
        b = int(ids_b[p]) if p < n_b else None
        gap = float(np.abs(rows_a[p] - rows_b[p]).max()) if a is not None and b is not None else None
        if a != b or (gap is not None and gap != 0.0):
            return Deviation(p, a, b, gap, n_a, n_b)
    return Deviation(None, None, None, None, n_a, n_b)
