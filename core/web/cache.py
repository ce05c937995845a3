"""The one place where Streamlit's caches wrap core/ (the rest of core/ never imports Streamlit).

* the model: ``st.cache_resource`` — one object shared by every session;
* traces and their derived sites (``site``: q, k, v, attention weights, sub-layer outputs, the MLP's): one
  process-wide ``ByteLRU`` bounded by bytes (``XRAY_CACHE_GB``, 1.5 GB by default), keyed on
  (model, prompt, settings[, layer]). Values are shared read-only, never pickled or copied; a page
  that only changes what it *looks at* (layer, head, colour) reads the cached trace and never runs
  the model again;
* everything else: ``st.cache_data`` / ``st.cache_resource``, bounded in entries (small results).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

import core.backends as backends
from core.cause import attribution, patching
from core.common.memo import ByteLRU
from core.common.progress import Progress
from core.engine import budget, tokens
from core.engine.trace import LAYER, MAX_TOKENS, MLP, LayerDetail, SiteReader, Trace, TraceKey, site_row
from core.engine.types import EMBEDDED_ID, TOY_ID, EmptyPromptError, LoadedModel, Phrase
from core.gen import diagnose, generate, serving
from core.gen.sampling import SamplingConfig
from core.inside import ablation, embeddings, heads
from core.learn import training
from core.learn.journey import MAX_NEW, greedy_continuation
from core.maths import attention, positions
from core.stream import anatomy, lens
from core.toy import load_loss_curve, word_order_demo
from core.web import jobs, sessions
from core.web.bar import Bar


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(spec: str) -> LoadedModel:
    """The model of ``spec``, loaded once per process; meanwhile a bar (``core.web.bar``) says how far the
    load is and what it does, in the reader's language."""
    with Bar(Phrase("load.start"), share_first=True) as bar:
        return backends.load_model(spec or None, progress=bar)


@st.cache_resource(show_spinner=False)
def store() -> ByteLRU:
    """The traces and derived layers of every session, bounded by bytes."""
    return ByteLRU(budget.cache_bytes())


def get_trace(spec: str, prompt: str, chat: bool, max_tokens: int = MAX_TOKENS) -> Trace:
    """The trace of ``prompt``, made once per key (``Trace.key``) and kept in the byte-bounded store."""
    return store().get(("trace", *TraceKey(spec, prompt, chat, max_tokens)),
                       lambda: backends.trace(get_model(spec), prompt, chat=chat, max_tokens=max_tokens))


def model_of(tr: Trace) -> LoadedModel:
    """The model a cached trace was made from (the spec in its ``key``)."""
    return get_model(tr.model_spec)


# A helper below that Streamlit's caches keep takes the trace and the model themselves: Streamlit hashes a trace
# by what it was made from (``Trace.key``: model, prompt, settings), never by its arrays, and a model by its spec.
BY_KEY = {Trace: lambda tr: tr.key, LoadedModel: lambda m: m.spec}


def next_token_logprob_of(tr: Trace) -> np.ndarray:
    """[T−1] log p of each real next token of the cached trace ``tr`` (``backends.next_token_logprob``: the LM
    head over every position), computed once per trace and kept in the byte-bounded store beside it."""
    return store().get(("logp", *tr.key), lambda: backends.next_token_logprob(model_of(tr), tr).logp)


class _Parts(NamedTuple):
    """One layer's MLP sites as the store keeps them (``nbytes`` counts against the budget)."""

    arrays: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def _site_key(tr: Trace, name: str, layer: int) -> tuple:
    return ("mlp" if site_row(name).kind == MLP else "layer", *tr.key, int(layer))


def _layer(tr: Trace, layer: int) -> LayerDetail:
    return store().get(("layer", *tr.key, int(layer)), lambda: backends.layer_detail(model_of(tr), tr, int(layer)))


def site(tr: Trace, name: str, layer: int | None = None) -> np.ndarray:
    """THE door of the pages to a recorded site (``core.engine.trace.SITES``) of the cached trace ``tr``:
    ``Trace.site``'s answer, with what is derived per layer (``LAYER_SITES``: one block replayed; ``MLP_SITES``:
    its MLP) kept in the byte-bounded store under the trace's own key, derived once for every session.
    A per-layer site the trace does not keep is given one layer at a time (``layer``)."""
    row = site_row(name)
    derived = row.kind in (LAYER, MLP) and name not in tr.kept_sites and not (row.kind == LAYER and tr.keeps(name))
    if not derived:
        return tr.site(name, layer)
    if layer is None:
        raise ValueError(f"{name!r} is derived one layer at a time here: pass a layer")
    if row.kind == LAYER:
        return getattr(_layer(tr, layer), name)
    parts = store().get(_site_key(tr, name, layer), lambda: _Parts(backends.mlp_sites(model_of(tr), tr, int(layer)))).arrays
    if name not in parts:
        raise KeyError(f"this model's MLP has no part for {name!r} ({row.meaning})")
    return parts[name]


def door(tr: Trace) -> SiteReader:
    """``site`` for one trace, as the core functions that take a door want it: (name, layer) → array."""
    return lambda name, layer=None: site(tr, name, layer)


def has_site(tr: Trace, name: str, layer: int) -> bool:
    """Whether ``site(tr, name, layer)`` answers without deriving (a page shows a spinner only when it does not)."""
    row = site_row(name)
    if name in tr.kept_sites or row.kind not in (LAYER, MLP) or (row.kind == LAYER and tr.keeps(name)):
        return True
    return _site_key(tr, name, layer) in store()


class NpzFile(NamedTuple):
    """The bytes of a trace's .npz file as the store keeps them: ``nbytes`` is what they count against the budget."""

    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


def get_trace_npz(tr: Trace) -> bytes:
    """The cached trace ``tr`` as a .npz file, built when the download is clicked from the store's derived
    layers (``site``: a layer a page derived is not derived again, one the file needs is derived once and
    kept like any other), and kept in the same byte-bounded store (``XRAY_CACHE_GB``), evicted like the rest;
    one bigger than the whole budget is handed out, not kept. The page asks only under ``core.web.download``'s
    limit (at 4,096 tokens the file would be 1.97 GB)."""
    def build() -> NpzFile:
        return NpzFile(backends.export_npz_bytes(model_of(tr), tr, detail=lambda layer: _layer(tr, layer)))

    return store().get(("npz", *tr.key), build).data


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=BY_KEY)
def get_continuation(tr: Trace, max_new: int = MAX_NEW) -> tuple[list[int], bool]:
    """The greedy answer the journey page shows (ids, stopped at an end token)."""
    loaded = model_of(tr)  # the trace's pass already filled the prompt's KV cache: no second prefill
    # the whole answer in one hold of the model's lock (an RLock: each step takes it again): twenty sessions
    # stepping in turn would each keep a prompt's KV cache alive for the whole burst, one after another they don't
    with loaded.lock:
        return greedy_continuation(loaded, tr.token_ids.tolist(), max_new, prefill=backends.prompt_prefill(loaded, tr))


# ---------------------------------------------------------------------------------------------
# generation: timings, measured once per (model, prompt, settings)


def compare_cache(loaded: LoadedModel, prompt: str, chat: bool, n: int, min_len: int = 0, run: int = 0) -> jobs.Job | jobs.Refused:
    """The same ``n`` greedy tokens with and without the KV cache, each timed ``TPOT_REPS`` times after a
    warm-up (``generate.compare_with_without``); the prompt's text is repeated up to ``min_len`` tokens so
    that the prefix the no-cache run recomputes is long. A measurement (see ``measurement``): the job,
    whose value is a ``generate.CacheComparison``, or a refusal. ``run``: a new number measures again.
    ``loaded``: the model the page holds (``get_model``'s); the page's own prompt, not a trace (no pass is traced)."""
    ids = generate.extended_prompt_ids(loaded.tokenizer, prompt, chat, min_len,
                                       max_len=min(generate.MAX_PROMPT_TOKENS, _room(loaded, n)))
    if not ids:
        raise EmptyPromptError("empty")
    return measurement(("compare_cache", loaded.spec, tuple(ids), n, run), lambda job: generate.compare_with_without(loaded, ids, n))


def _room(loaded: LoadedModel, n: int) -> int:
    """Prompt tokens that still leave room for ``n`` new ones in the context window."""
    return max(1, backends.context_room(loaded) - n)


def measured_costs(loaded: LoadedModel, run: int = 0) -> jobs.Job | jobs.Refused:
    """Prefill and decode costs per token on this model, here (``generate.measure_costs``: the one TPOT
    method). A measurement (see ``measurement``: one in flight per session, fresh ones capped per server):
    the job, whose value is a ``generate.TpotMeasure``, or a refusal. ``run``: a new number measures again."""
    n_prefill = min(128, max(8, int(loaded.facts.max_positions or 128) - 16))
    return measurement(("measured_costs", loaded.spec, run), lambda job: generate.measure_costs(loaded, n_prefill=n_prefill))


def tpot(loaded: LoadedModel, ids: tuple[int, ...], cfg: tuple[Any, ...] = (), run: Any = 0) -> jobs.Job | jobs.Refused:
    """The one TPOT of this prompt (``generate.measure_tpot``) under the sampling settings ``cfg``
    (``astuple`` of a SamplingConfig; greedy when empty), as the stepper shows it beside its own
    recorded passes, on request. A measurement (see ``measurement``): the job, whose value is a
    ``generate.TpotMeasure``, or a refusal. ``run``: a new number measures again."""
    return measurement(("tpot", loaded.spec, ids, cfg, run),
                       lambda job: generate.measure_tpot(loaded, list(ids), cfg=SamplingConfig(*cfg) if cfg else None))


@st.cache_resource(show_spinner=False, max_entries=4, hash_funcs=BY_KEY)
def warmed_up(loaded: LoadedModel) -> bool:
    """One tiny cached generation per model and process: the very first forward pass pays one-off
    start-up costs (memory pools, kernel selection) that would otherwise inflate the first TTFT shown."""
    generate.warm_up(loaded)
    return True


# ---------------------------------------------------------------------------------------------
# inside the real model: embeddings, ablation, the head atlas


@st.cache_data(show_spinner=False, max_entries=4, hash_funcs=BY_KEY)
def id_study(loaded: LoadedModel, n_pairs: int = 2000, seed: int = 0) -> embeddings.IdDistanceStudy:
    return embeddings.id_distance_study(embeddings.embedding_matrix(loaded), n_pairs, seed)


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def embedding_rows(loaded: LoadedModel, ids: tuple[int, ...]) -> np.ndarray:
    """Rows of E for ``ids`` [n, d], read from the weight matrix itself (not from a trace)."""
    return embeddings.lookup(embeddings.embedding_matrix(loaded), list(ids)).copy()


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def pca_words(loaded: LoadedModel, words: tuple[str, ...]) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(words, their pieces joined, coords [n, 2], explained [2]) for the PCA map."""
    vecs = embeddings.word_vectors(loaded, embeddings.embedding_matrix(loaded), list(words))
    if len(vecs) < 2:
        return [], [], np.zeros((0, 2)), np.zeros(2)
    p = embeddings.pca2(np.stack([v.vector for v in vecs]))
    return [v.word for v in vecs], [" + ".join(v.pieces) for v in vecs], p.coords, p.explained


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def sources(tr: Trace) -> list[str]:
    """Where each token of the cached trace ``tr`` came from in the prompt's text."""
    loaded = model_of(tr)
    tok = loaded.tokenizer
    enc = tokens.encode(tok, tr.prompt, chat=tr.chat, max_positions=loaded.facts.max_positions)  # the trace's ids
    return embeddings.token_sources(tok, enc.text, tr.prompt, enc.ids, tr.chat)


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=BY_KEY)
def probs(loaded: LoadedModel, ids: tuple[int, ...], ablate: tuple[tuple[int, Any], ...]) -> np.ndarray:
    return ablation.next_token_probs(loaded, list(ids), list(ablate))


@st.cache_data(show_spinner=False, max_entries=8, hash_funcs=BY_KEY)
def layer_sweep(loaded: LoadedModel, ids: tuple[int, ...], layer: int) -> np.ndarray:
    """[H] KL(before ‖ after) for ablating each head of ``layer`` alone."""
    before = probs(loaded, ids, ())
    after = ablation.sweep_heads(loaded, list(ids), [layer])[0]  # [H, V]
    return np.array([ablation.kl_divergence(before, a) for a in after])


@st.cache_data(show_spinner=False, max_entries=12, hash_funcs=BY_KEY)
def atlas(tr: Trace) -> heads.HeadAtlas:
    """Head metrics of the cached trace (computed once per prompt, not per slider move), one layer at a time."""
    return heads.head_atlas_of(site(tr, "attn_pattern", i) for i in range(tr.n_layers))


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def head_across_layers(tr: Trace, head: int, hide: bool, start: int | None) -> heads.Grid:
    """One head in every layer, as drawn (small: at most attnview.CELLS² cells per layer)."""
    n = tr.n_layers
    return heads.head_grid((site(tr, "attn_pattern", i)[head] for i in range(n)), heads.head_titles(n), hide, start)


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def sentence_vector(loaded: LoadedModel, text: str) -> np.ndarray:
    """Mean-pooled final hidden state of ``text`` [d] (a crude sentence vector, for contrast only)."""
    tr = backends.trace(loaded, text, max_tokens=128)
    return embeddings.mean_pooled(tr.final_hidden)


@st.cache_data(show_spinner=False, max_entries=4, hash_funcs=BY_KEY)
def model_sweep(loaded: LoadedModel, ids: tuple[int, ...]) -> np.ndarray:
    """[L, H] KL(before ‖ after) for ablating every head of every layer alone (batched passes)."""
    before = probs(loaded, ids, ())
    after = ablation.sweep_heads(loaded, list(ids), list(range(loaded.facts.n_layers)))  # [L, H, V]
    return np.array([[ablation.kl_divergence(before, a) for a in row] for row in after])


# ---------------------------------------------------------------------------------------------
# the maths pages: the seeded experiment, timings, per-layer checks on the weights


TIMING_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)  # up to the cost text's 4K → 8K (≈ 1.5 s a run at 8K on 2 cores)


@st.cache_data(show_spinner=False, max_entries=4)
def scale_experiment(d_values: tuple[int, ...]) -> dict[str, np.ndarray]:
    return attention.scale_experiment(d_values)


@st.cache_data(show_spinner=False, max_entries=2, hash_funcs=BY_KEY)
def attention_timing(loaded: LoadedModel, lengths: tuple[int, ...] = TIMING_LENGTHS) -> dict[str, Any]:
    """``attention.time_attention`` as it came, plus ``measured_at``: when it finished (an aware UTC
    datetime). Measured once per process and shared by every session, until ``attention_timing.clear(loaded)``
    (the cost tab's "Measure again") drops it for everyone; holds the model's lock so no forward pass runs meanwhile."""
    with loaded.lock:
        timing = attention.time_attention(lengths)
    return {**timing, "measured_at": datetime.datetime.now(datetime.UTC)}


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def rope_check(tr: Trace, layer: int) -> dict[str, np.ndarray]:
    """RoPE redone by hand on layer ``layer`` of the cached trace (see core.maths.positions.rope_check)."""
    return positions.rope_check(model_of(tr), tr, layer, door(tr))


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def recombine(tr: Trace, layer: int) -> dict[str, np.ndarray]:
    """Per-head outputs → concat → W_O on the cached trace (see core.maths.attention.recombine_layer)."""
    return attention.recombine_layer(model_of(tr), tr, layer, door(tr))


# ---------------------------------------------------------------------------------------------
# the residual stream, logits and anatomy


@st.cache_data(show_spinner=False, max_entries=8, hash_funcs=BY_KEY)
def get_lens(tr: Trace, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The logit lens of the cached trace at positions lo … hi−1: top ids [L+1, T'], their probabilities, and their text."""
    return lens.logit_lens_with_text(model_of(tr), tr, lo, hi)


@st.cache_data(show_spinner=False, max_entries=4, hash_funcs=BY_KEY)
def get_breakdown(loaded: LoadedModel) -> dict[str, int]:
    """Parameters per role of the loaded model (walks named_parameters once per model)."""
    return anatomy.param_breakdown(loaded.model)


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=BY_KEY)
def token_texts(loaded: LoadedModel, ids: tuple[int, ...]) -> list[str]:
    """Readable, visible text of a few token ids (the candidate tables)."""
    return tokens.visible_tokens(loaded.tokenizer, ids)


# ---------------------------------------------------------------------------------------------
# training vs inference (core.learn.training)


def scored_trace(tr: Trace) -> Trace:
    """The cached trace ``tr``, or (a prompt over ``training.MAX_POSITIONS`` tokens) the cached trace of its first ones."""
    if tr.n_tokens <= training.MAX_POSITIONS:
        return tr
    return store().get(("trace_head", tr.model_spec, tr.prompt, tr.chat, training.MAX_POSITIONS),
                       lambda: training.scored_trace(model_of(tr), tr))


@st.cache_data(show_spinner=False, max_entries=8, hash_funcs=BY_KEY)
def teacher_forcing(tr: Trace) -> training.TeacherForcing:
    """Every position's next-token loss from the one parallel pass of the (first positions of the) prompt."""
    return training.teacher_forcing(model_of(tr), scored_trace(tr), n_total=tr.n_tokens)


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=BY_KEY)
def same_logits(tr: Trace, t: int) -> training.SameLogits:
    """Row ``t`` of the parallel pass beside a separate forward pass of the prefix 0 … t."""
    return training.same_logits(model_of(tr), scored_trace(tr), t)


# ---------------------------------------------------------------------------------------------
# the toy (the toy page always shows the toy, whatever model the sidebar holds)


def toy_trace(prompt: str, chat: bool) -> tuple[Trace | None, str | None]:
    """(trace, None), or (None, an i18n key / message) for the page to show."""
    if not prompt or not prompt.strip():
        return None, "hint.empty_prompt"
    try:
        return get_trace(TOY_ID, prompt, chat), None
    except EmptyPromptError:
        return None, "hint.empty_prompt"
    except Exception as e:  # never a traceback on the page
        return None, f"{type(e).__name__}: {e}"


def real_facts() -> dict[str, Any] | None:
    """SmolLM2's facts for the comparison table (None if it cannot be loaded here)."""
    try:
        return get_model(EMBEDDED_ID).facts.to_dict()
    except Exception:
        return None


@st.cache_data(show_spinner=False, max_entries=16)
def word_order(a: str, b: str) -> list[dict[str, Any]]:
    return word_order_demo(a, b)


@st.cache_data(show_spinner=False, max_entries=1)
def shipped_curve() -> dict[str, Any]:
    return load_loss_curve()


# ---------------------------------------------------------------------------------------------
# cause and effect (core.cause): the recorded pair, patching sweeps, one patched run, attributions


@st.cache_resource(show_spinner=False, max_entries=8, hash_funcs=BY_KEY)
def cause_baseline(loaded: LoadedModel, ids_clean: tuple[int, ...], ids_corrupted: tuple[int, ...]) -> patching.Baseline:
    """The clean and corrupted runs, recorded once: every patched run copies from it (read-only)."""
    return patching.capture(loaded, ids_clean, ids_corrupted)


@st.cache_resource(show_spinner=False)
def runner() -> jobs.Runner:
    """Long computations in server threads, outliving any script run (core.web.jobs), and the limit on
    fresh measurements per server per minute."""
    return jobs.Runner()


def cause_sweep(loaded: LoadedModel, ids_clean: tuple[int, ...], ids_corrupted: tuple[int, ...], answer: int, foil: int, site: str,
                progress: Progress | None = None) -> np.ndarray:
    """Raw logit differences of every patched run of ``site``: [L, T], or [L, H] for single heads.
    Computed in a server thread (``runner``), not in the script: a rerun while it runs (a language
    switch, a second visitor) waits for the same sweep and picks it up where it is, instead of losing
    it; ``progress(done, total, words)`` (the page's ``core.web.bar.Bar``) draws its bar meanwhile, in every session that waits."""
    key = ("cause_sweep", loaded.spec, ids_clean, ids_corrupted, answer, foil, site)
    job = runner().job(key)
    if job is None:
        base = cause_baseline(loaded, ids_clean, ids_corrupted)  # in the script: Streamlit's caches

        def compute(job: jobs.Job) -> np.ndarray:
            grid = patching.sweep(loaded, base, site, answer, foil, progress=job.report)
            grid.flags.writeable = False  # shared by every session
            return grid

        job = runner().start(key, compute, heavy=True)
    return jobs.wait(job, progress, alive=sessions.alive())


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=BY_KEY)
def cause_run(loaded: LoadedModel, ids_clean: tuple[int, ...], ids_corrupted: tuple[int, ...], site: str, layer: int, pos: int,
              head: int | None) -> np.ndarray:
    """One patched run's next-token scores [V]."""
    base = cause_baseline(loaded, ids_clean, ids_corrupted)
    return patching.patched_logits(loaded, base, patching.Patch(site, layer, pos, head))


def cause_attribution(loaded: LoadedModel, ids: tuple[int, ...], answer: int, foil: int, steps: int,
                      progress: Progress | None = None) -> attribution.Attributions:
    """Gradient × input and integrated gradients of the clean prompt (in a server thread, like ``cause_sweep``)."""
    key = ("cause_attribution", loaded.spec, ids, answer, foil, steps)
    job = runner().job(key)
    if job is None:
        job = runner().start(key, lambda job: attribution.attribute(loaded, ids, answer, foil, steps, progress=job.report),
                             heavy=True)
    return jobs.wait(job, progress, alive=sessions.alive())


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=BY_KEY)
def cause_attention_row(loaded: LoadedModel, prompt: str, layer: int) -> np.ndarray:
    """The last position's attention at ``layer``, mean over heads [T] (plain text, no chat template)."""
    tr = get_trace(loaded.spec, prompt, False)
    return attribution.last_row_attention(tr, layer, door(tr))


# ---------------------------------------------------------------------------------------------
# diagnose: the symptom measurements, once per (model, settings, run number) and server process


# Measurements run in server threads (``runner``): a rerun never loses one, a session has at most one in
# flight, and the server starts at most ``XRAY_MEASURES_PER_MIN`` (``core.common.settings``) fresh ones a minute. Each returns the job
# (running or done: core.web.measure.show waits on it and draws its bar) or a ``jobs.Refused``.


def measurement(key: tuple, compute: Any) -> jobs.Job | jobs.Refused:
    """The measurement ``key`` for this session (``jobs.Runner.measure``); ``compute(job)`` makes it. Keyed on
    the visitor too: one visitor's live measurement (perhaps taken on a busy machine) is never shown to another."""
    return runner().measure((*key, sessions.visitor()), compute, st.session_state, who=sessions.browser())


def diagnose_prefill(loaded: LoadedModel, lengths: tuple[int, ...], run: int = 0) -> jobs.Job | jobs.Refused:
    """Tokenising and prefill time at each input length (``core.gen.diagnose.measure_prefill_curve``);
    its progress counts the lengths, in words. ``run``: a new number measures again."""
    return measurement(("diagnose_prefill", loaded.spec, lengths, run),
                       lambda job: diagnose.measure_prefill_curve(loaded, list(lengths), progress=job.report))


def diagnose_decode(loaded: LoadedModel, prompt: str, chat: bool, n_decode: int, run: int = 0) -> jobs.Job | jobs.Refused:
    """One request timed end to end (``core.gen.diagnose.measure_decode``); its progress counts the runs, in words."""
    return measurement(("diagnose_decode", loaded.spec, prompt, chat, n_decode, run),
                       lambda job: diagnose.measure_decode(loaded, prompt, chat, n_decode, progress=job.report))


# the serving lab: a plain copy of the model for transformers' engine, sharing the traced model's weights;
# a run holds the copy's own lock (one student's workload never blocks a trace) and a bounded block pool.
@st.cache_resource(show_spinner=False, max_entries=2)
def serving_model(spec: str) -> LoadedModel:
    return serving.plain_model(get_model(spec))


@st.cache_data(show_spinner=False, max_entries=8)
def serving_padded(spec: str, prompts: tuple[str, ...], side: str) -> serving.PaddedBatch:
    return serving.padded_batch(serving_model(spec), list(prompts), side)


GONE_GRACE_S = 10.0  # a tab that reconnects within this (a network blip) keeps its run


def session_gone() -> Callable[[], bool]:
    """A ``stop()`` for work this session starts in a server thread: true once its tab has been gone (its
    connection closed and not reopened) for GONE_GRACE_S seconds."""
    ctx, seen = get_script_run_ctx(), [time.monotonic()]
    rt = Runtime.instance() if ctx is not None and Runtime.exists() else None

    def gone() -> bool:
        if rt is None or rt.is_active_session(ctx.session_id):
            seen[0] = time.monotonic()
        return time.monotonic() - seen[0] > GONE_GRACE_S

    return gone


def serving_run(spec: str, requests: tuple[serving.Request, ...], settings: serving.EngineSettings, part: str,
                run: int) -> jobs.Job | jobs.Refused:
    """This session's run number ``run`` of the lab's ``part``: a measurement in a server thread that a rerun
    (any change on the page) waits for, never restarts, and that stops once the tab is gone. Its value: one
    ``ServeResult`` checked against ``generate`` alone, or for ``prefix`` two with block sharing on, two off."""
    plain, stop = serving_model(spec), session_gone()
    plan = [(True, True), (True, False), (False, True), (False, False)] if part == "prefix" else [(settings.prefix_sharing, True)]

    def compute(job: jobs.Job) -> list[serving.ServeResult]:
        return [serving.run_workload(plain, requests, **{**vars(settings), "prefix_sharing": sharing}, solo=solo, stop=stop,
                                     progress=lambda d, t, w=None, k=k: job.report(k * t + d, len(plan) * t, w))
                for k, (sharing, solo) in enumerate(plan)]

    return measurement(("serving_run", getattr(get_script_run_ctx(), "session_id", None), spec, requests, settings, part, run), compute)
