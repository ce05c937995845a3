"""Command line: ``python -m core trace "PROMPT" -o out.npz [--model PATH] [--chat] [--max-tokens N]``
``python -m core generate "PROMPT" --steps N -o gen.npz [--model PATH] [--chat] [--temperature T …]``
and ``python -m core patch "CLEAN" "CORRUPTED" --answer " Paris" --foil " Rome" -o patch.npz [--model PATH] [--heads]``
and ``python -m core serve-lab WORKLOAD.jsonl -o result.json [--no-prefix-sharing] [--page-size N] [--blocks N] …``
(``core.gen.serving_cli``).

Every argument is checked before the model loads, and so is the output file: the file written is
exactly the path given (nothing is appended to it; a path naming a folder, ``out/``, is refused), and it is
written atomically (a temporary file beside it, renamed onto it: a failed write leaves an old file whole).
Errors are one line, ``error: …``, exit code 2. A reader that goes away (``… | head -c 10``) costs only the
lines it did not read: the file is still written and the exit code stays the command's own.
``generate`` reports its progress on stderr; Ctrl-C saves the tokens generated so far (exit 130).
``patch`` refuses prompts whose token counts differ and answers that are not one token, saying why."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, TypeVar

import numpy as np

from core import backends
from core.cause import pair, patching
from core.common import digits
from core.common.progress import Progress
from core.engine.trace import EXPORT_KEYS, MAX_TOKENS, PATTERN_EXPORT_MAX, Trace
from core.engine.types import ConfigError, EmptyPromptError, ModelLoadError, UnsupportedArchitectureError, say
from core.gen import generate, serving_cli
from core.gen.sampling import SamplingConfig

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
PROGRESS_EVERY_S = 1.0  # seconds between two progress lines of ``generate``
R = TypeVar("R")  # what a command's work returns to its report


class CliError(Exception):
    """A sentence for the user: printed as ``error: …``, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, answering a bad argument with one ``error: …`` line instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        head = "argument "
        if message.startswith(head) and ": -" in message:  # "argument --top-k: --top-k must …": say it once
            message = message.split(": ", 1)[1]
        message = message[:1].upper() + message[1:]
        raise CliError(message if message.endswith(".") else message + ".")


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


# ---------------------------------------------------------------------------------------------
# argument types: each refuses with one sentence that names the option


def _int_arg(flag: str, lo: int, hi: int | None = None, what: str = "") -> Callable[[str], int]:
    rule = f"from {lo} to {hi}" if hi is not None else f"{lo} or more"

    def parse(s: str) -> int:
        c = digits.check(s, lo, hi)  # the one check: ASCII digits only ("²", "٣", "1_0" are refused)
        if not c.ok:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number {rule}{what}; got {s!r}.")
        return c.n

    return parse


def _float_arg(flag: str, rule: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or not ok(v):
            raise argparse.ArgumentTypeError(f"{flag} must be {rule}; got {s!r}.")
        return v

    return parse


MAX_TOKENS_ARG = _int_arg("--max-tokens", 1, MAX_TOKENS, f" (the trace limit is {MAX_TOKENS} tokens)")
STEPS_ARG = _int_arg("--steps", 1)
TOP_K_ARG = _int_arg("--top-k", 0, None, " (0 = off)")
SEED_ARG = _int_arg("--seed", 0)
TOP_P_ARG = _float_arg("--top-p", "a number above 0 and at most 1 (1 = off)", lambda v: 0 < v <= 1)
TEMPERATURE_ARG = _float_arg("--temperature", "a finite number, 0 (greedy) or more", lambda v: v >= 0)


# ---------------------------------------------------------------------------------------------
# the output file: checked before the model loads, written exactly where the user said


def check_output(raw: str, flag: str, example: str) -> str:
    """Refuse an output path that cannot be written, before any model is loaded (returns ``raw``).

    The file written is ``raw`` itself: nothing is appended (numpy would add ``.npz`` to a name
    without it, so ``-o /dev/full`` would have created ``/dev/full.npz``)."""
    if not raw.strip():
        raise CliError(f"{flag} needs a file name, such as {example}.")
    p = Path(raw)
    if p.is_dir() or raw.endswith(("/", os.sep)):  # Path("out/") is "out": the slash says a folder was meant
        raise CliError(f"{raw} is a folder; give {flag} a file name, such as {p / example}.")
    _check_text(raw, flag)
    parent = p.parent
    if not parent.exists():
        raise CliError(f"Cannot write {raw}: the folder {parent} does not exist.")
    if not parent.is_dir():
        raise CliError(f"Cannot write {raw}: {parent} is not a folder.")
    nonblock = getattr(os, "O_NONBLOCK", 0)  # a FIFO without a reader must not hang us here
    try:
        if os.path.lexists(p):
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND | nonblock))  # opens, writes nothing
        else:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))  # a probe, removed at once
            p.unlink()
    except OSError as e:
        raise CliError(f"Cannot write {raw}: {e.strerror or e}.") from None
    return raw


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C is ignored while a file is being written (a half-written .npz helps nobody)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _atomic_target(p: Path) -> Path | None:
    """Where the temporary file goes beside, and is renamed onto: the regular file ``p`` names (a symlink
    followed), or ``p`` when nothing is there yet; None for a device, a FIFO … (written in place: a rename
    would replace ``/dev/null`` itself)."""
    if not os.path.lexists(p):
        return p
    real = Path(os.path.realpath(p))
    return real if real.is_file() else None  # /dev/stdout on a pipe resolves to "pipe:[…]": written in place


def write_output(raw: str, write: Callable[[BinaryIO], Any]) -> None:
    """``write(file)`` into exactly ``raw``, atomically: into a temporary file beside it, renamed onto it
    once complete, so a failed write (disk full …) leaves an existing file as it was and no half-written
    file behind. A failed write becomes a CliError. A device or a FIFO (``/dev/stdout``) is written in place."""
    p = Path(raw)
    target = _atomic_target(p)
    try:
        with _no_interrupt():
            if target is None:
                with open(p, "wb") as f:
                    write(f)
                return
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            except PermissionError:  # a writable file in a folder we may not add to: written in place
                with open(p, "wb") as f:
                    write(f)
                return
            try:
                with os.fdopen(fd, "wb") as f:
                    write(f)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    mode = stat.S_IMODE(target.stat().st_mode)  # an existing file keeps its permissions
                except FileNotFoundError:
                    umask = os.umask(0)
                    os.umask(umask)
                    mode = 0o666 & ~umask  # what open() would have made
                os.chmod(tmp, mode)
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except OSError as e:
        raise CliError(f"Could not write {raw}: {e.strerror or e}.") from None


def _model_error(e: Exception) -> str:
    if isinstance(e, ConfigError):
        return f"The model's config.json cannot be read: {e.detail or e.code}."
    return str(e) or type(e).__name__


MODEL_ERRORS = (ModelLoadError, EmptyPromptError, UnsupportedArchitectureError, ValueError)


def _check_text(text: str, what: str) -> None:
    """Refuse text that is not Unicode: bytes of the command line that are not UTF-8 reach Python as lone
    surrogates (``\\udcff``), which no tokenizer or file name takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CliError(f"{what} is not valid UTF-8 text (character {e.start + 1} is the undecodable byte or lone "
                       f"surrogate {text[e.start]!a}); check the terminal's encoding.") from None


def _prompt(a: argparse.Namespace) -> None:
    _check_text(a.prompt, "The prompt")
    if not a.prompt.strip():
        raise CliError("The prompt is empty.")


# ---------------------------------------------------------------------------------------------
# the shape of every command


def _add_out_and_model(p: _Parser, long_flag: str, example: str) -> None:
    """``-o`` (stored as ``out``; ``example`` is its default and the name the error messages suggest) and
    ``--model``: every command has both."""
    p.add_argument("-o", long_flag, dest="out", metavar=long_flag[2:].upper(), default=example,
                   help="the .npz file to write (exactly this path)")
    p.add_argument("--model", default=None, help="a local HF folder, an HF cache id, or 'toy' (default: embedded SmolLM2)")


def _run(p: _Parser, argv: list[str], check: Callable[[argparse.Namespace], None],
         work: Callable[[argparse.Namespace], R], report: Callable[[argparse.Namespace, R], int]) -> int:
    """One command: its arguments parsed and ``check``-ed, and the output file checked, before any model
    loads; then ``work`` (which loads and uses the model and writes the file) and ``report`` (what it
    prints, and the exit code). A refusal or a model error is one ``error: …`` line and exit code 2,
    Ctrl-C during the work exit code 130 — never a traceback."""
    try:
        a = p.parse_args(argv)
        check(a)
        check_output(a.out, "-o", p.get_default("out"))
    except CliError as e:
        return _fail(str(e))
    try:
        result = work(a)
    except CliError as e:
        return _fail(str(e))
    except MODEL_ERRORS as e:
        return _fail(_model_error(e))
    except KeyboardInterrupt:
        print("interrupted: nothing was saved.", file=sys.stderr)
        return EXIT_INTERRUPTED
    return report(a, result)


# ---------------------------------------------------------------------------------------------
# trace


def trace_main(argv: list[str]) -> int:
    ap = _Parser(prog="python -m core trace", description="Trace one forward pass and save it as .npz")
    ap.add_argument("prompt")
    _add_out_and_model(ap, "--out", "trace.npz")
    ap.add_argument("--chat", action="store_true", help="apply the chat template")
    ap.add_argument("--max-tokens", type=MAX_TOKENS_ARG, default=MAX_TOKENS,
                    help=f"cut the prompt at this many tokens (1 to {MAX_TOKENS}, the default)")

    def work(a: argparse.Namespace) -> Trace:
        loaded = backends.load_model(a.model)
        tr = backends.trace(loaded, a.prompt, chat=a.chat, max_tokens=a.max_tokens)
        write_output(a.out, lambda f: backends.export_npz(loaded, tr, f))
        return tr

    def report(a: argparse.Namespace, tr: Trace) -> int:
        for n in tr.notes:
            print(f"note: {n}", file=sys.stderr)
        pattern = tr.n_tokens <= PATTERN_EXPORT_MAX
        keys = " ".join(k for k in EXPORT_KEYS if pattern or k != "attn_pattern")  # the registry's export keys
        print(f"{a.out}: {tr.n_tokens} tokens, {tr.n_layers} layers, {tr.n_heads} heads; keys: {keys}")
        if not pattern:
            print(f"note: attn_pattern is left out above {PATTERN_EXPORT_MAX} tokens (meta['omitted'] says why)", file=sys.stderr)
        return 0

    return _run(ap, argv, _prompt, work, report)


# ---------------------------------------------------------------------------------------------
# generate


def _progress(requested: int) -> Progress:
    """The progress of ``generate_record``: its words on stderr about once a second, and a
    note the first time if the model's context cut ``--steps`` down."""
    last = {"t": -math.inf}

    def on_step(done: int, total: int, words: Any = None) -> None:
        if done == 1 and total < requested:
            print(f"note: --steps {requested} is more than the model's context leaves after the prompt; "
                  f"generating at most {total} tokens.", file=sys.stderr)
        if done < total and time.monotonic() - last["t"] >= PROGRESS_EVERY_S:
            last["t"] = time.monotonic()
            print(say(words), file=sys.stderr, flush=True)

    return on_step


def _sampling(a: argparse.Namespace) -> SamplingConfig:
    """The decoding the options ask for: greedy without a --temperature above 0 (saying so when sampling
    options were given anyway)."""
    if a.temperature is None or a.temperature == 0:
        if a.top_k or a.top_p < 1 or a.seed is not None:
            print("note: --top-k, --top-p and --seed only act with a --temperature above 0; decoding greedily.",
                  file=sys.stderr)
        return generate.greedy_config()
    return SamplingConfig(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed)


def generate_main(argv: list[str]) -> int:
    """``python -m core generate "PROMPT" --steps N -o gen.npz [--model PATH] [--chat] …``"""
    p = _Parser(prog="python -m core generate", description="Prefill + decode with a KV cache, timed step by step.")
    p.add_argument("prompt")
    p.add_argument("--steps", type=STEPS_ARG, default=16,
                   help="new tokens at most (the prefill's included); capped by the model's context")
    _add_out_and_model(p, "--output", "gen.npz")
    p.add_argument("--chat", action="store_true", help="wrap the prompt with the chat template")
    p.add_argument("--temperature", type=TEMPERATURE_ARG, default=None, help="0 or absent: greedy")
    p.add_argument("--top-k", type=TOP_K_ARG, default=0, help="0 = off")
    p.add_argument("--top-p", type=TOP_P_ARG, default=1.0, help="1 = off")
    p.add_argument("--seed", type=SEED_ARG, default=None)

    def work(a: argparse.Namespace) -> dict:
        cfg = _sampling(a)
        loaded = backends.load_model(a.model)
        rec = generate.generate_record(loaded, a.prompt, a.steps, cfg, chat=a.chat, progress=_progress(a.steps))
        if len(rec["token_ids"]):
            write_output(a.out, lambda f: np.savez(f, **rec))
        return rec

    def report(a: argparse.Namespace, rec: dict) -> int:
        meta = json.loads(str(rec["meta"]))
        stop = meta["stop_reason"]
        for note in meta.get("notes", []):  # the prompt cut at the trace limit or the model's positions …
            print(f"note: {note}", file=sys.stderr)
        n = len(rec["token_ids"])
        if not n:  # Ctrl-C during the prefill
            print("interrupted before the first token: nothing was saved.", file=sys.stderr)
            return EXIT_INTERRUPTED
        tp = rec["step_seconds"][1:]
        print(f"{n} tokens, stop: {stop}; TTFT {rec['prefill_seconds'] * 1e3:.1f} ms"
              + (f", median TPOT {np.median(tp) * 1e3:.1f} ms" if len(tp) else ""))
        print(f"KV cache at the end: {int(rec['kv_tokens'][-1])} positions, {int(rec['kv_bytes'][-1]):,} bytes")
        print(f"text: {str(rec['text'])!r}")
        print(f"wrote {a.out}")
        if stop == "interrupted":
            print(f"interrupted: saved the {n} tokens generated so far to {a.out} (stop_reason \"interrupted\").",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        return 0

    return _run(p, argv, _prompt, work, report)


# ---------------------------------------------------------------------------------------------
# patch


def _patch_progress(site: str) -> Progress:
    """The sweep's progress on stderr, about once a second."""
    last = {"t": time.monotonic()}

    def on_runs(done: int, total: int, _words: Any = None) -> None:
        if done < total and time.monotonic() - last["t"] >= PROGRESS_EVERY_S:
            last["t"] = time.monotonic()
            print(f"{site}: {done}/{total} runs", file=sys.stderr, flush=True)

    return on_runs


def _patch_args(a: argparse.Namespace) -> None:
    for text, what in ((a.clean, "The clean prompt"), (a.corrupted, "The corrupted prompt"), (a.answer, "--answer"),
                       (a.foil, "--foil")):
        _check_text(text, what)
    for text, what in ((a.clean, "clean"), (a.corrupted, "corrupted")):
        if not text.strip():
            raise CliError(f"The {what} prompt is empty.")
        if len(text) > pair.MAX_CHARS:
            raise CliError(f"The {what} prompt is {len(text):,} characters long; at most {pair.MAX_CHARS:,} are accepted.")
    for text, flag, example in ((a.answer, "--answer", "' Paris'"), (a.foil, "--foil", "' Rome'")):
        if text == "":
            raise CliError(f"{flag} is empty; give one token, such as {example} (a leading space counts).")
    if a.answer == a.foil:
        raise CliError("--answer and --foil are the same text; their logit difference is always 0.")


def patch_main(argv: list[str]) -> int:
    """``python -m core patch "CLEAN" "CORRUPTED" --answer " Paris" --foil " Rome" -o patch.npz``"""
    p = _Parser(prog="python -m core patch", description="Activation patching: copy one activation of the clean run into the "
                "corrupted run, for every (layer, position) of each site; save the patched runs' logit differences.")
    p.add_argument("clean", help="the clean prompt (plain text, no chat template)")
    p.add_argument("corrupted", help="the corrupted prompt: the same number of tokens, one fact changed")
    p.add_argument("--answer", required=True, help="one token the clean prompt leads to, e.g. ' Paris'")
    p.add_argument("--foil", required=True, help="one token the corrupted prompt leads to, e.g. ' Rome'")
    _add_out_and_model(p, "--out", "patch.npz")
    p.add_argument("--heads", action="store_true", help="also patch each head's output at the last position (z [L, H])")

    def work(a: argparse.Namespace) -> dict[str, np.ndarray]:
        loaded = backends.load_model(a.model)
        pt = pair.encode_pair(loaded.tokenizer, a.clean, a.corrupted, max_positions=loaded.facts.max_positions)
        pt.require_same_length()
        ans = pair.answers(loaded.tokenizer, a.answer, a.foil)
        base = patching.capture(loaded, pt.ids_clean, pt.ids_corrupted)
        sites = [*patching.BY_POSITION, *([patching.HEAD] if a.heads else [])]
        grids = {s: patching.sweep(loaded, base, s, ans.answer, ans.foil, progress=_patch_progress(s)) for s in sites}
        rec = patching.export(loaded, pt, ans, base, grids)
        write_output(a.out, lambda f: np.savez(f, **rec))
        return rec

    def report(a: argparse.Namespace, rec: dict[str, np.ndarray]) -> int:
        c, r = float(rec["logit_diff_clean"]), float(rec["logit_diff_corrupted"])
        L, T = rec["resid"].shape
        print(f"{T} tokens, {L} layers; logit difference clean {c:.3f}, corrupted {r:.3f}")
        for site in patching.PATCHED:
            if site in rec:
                norm = patching.normalise(rec[site], c, r)
                if norm is not None:
                    i, j = patching.best_cell(norm)
                    print(f"{site}: most restored at layer {i}, {'head' if site == patching.HEAD else 'position'} {j} ({norm[i, j]:.0%})")
        print(f"wrote {a.out}: keys {' '.join(rec)}")
        return 0

    return _run(p, argv, _patch_args, work, report)


class _ClosedPipeSafe:
    """A text stream (stdout or stderr) that outlives its reader: ``… | head -c 10`` closes the pipe, and the
    next write raises BrokenPipeError. Then, as Python's documentation advises (library/signal, "Note on
    SIGPIPE"), devnull takes the stream's file descriptor, so what is still printed (and the flush at exit)
    goes nowhere, and the command carries on: its file is written and its exit code is its own. Text the
    stream's encoding cannot take (a lone surrogate) is written with backslash escapes, not raised."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._closed = False

    def _lost(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        if self._closed:
            return len(text)
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                enc = getattr(self._stream, "encoding", None) or "utf-8"
                return self._stream.write(text.encode(enc, "backslashreplace").decode(enc))
        except BrokenPipeError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        if self._closed:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._lost()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ClosedPipeSafe(out), _ClosedPipeSafe(err)
    try:
        return _main(argv)
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_ERROR
    cmd, rest = argv[0], argv[1:]
    commands = {"trace": trace_main, "generate": generate_main, "patch": patch_main,
                "serve-lab": lambda rest: serving_cli.main(rest, sys.modules[__name__])}
    if cmd not in commands:
        print(f"error: unknown command '{cmd}'; use 'trace', 'generate', 'patch' or 'serve-lab'.\n{__doc__}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return commands[cmd](rest)
    except SystemExit as e:  # argparse's -h
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        print("interrupted: nothing was saved.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (MemoryError, RuntimeError, OSError) as e:  # torch's out-of-memory, a failed read …: one line, no traceback
        return _fail(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    raise SystemExit(main())
