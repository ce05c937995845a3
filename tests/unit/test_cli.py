"""The CLI (``python -m core trace|generate``) never lets an exception out (issue 15, section 4).

Arguments and the output path are checked before any model loads; every refusal is one line,
``error: <sentence>``, exit code 2; the file written is exactly the path given; ``generate`` shows
progress on stderr, caps ``--steps`` at what the model's context leaves, and Ctrl-C saves the
tokens generated so far (exit 130)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

import core.__main__ as cli
from core import backends
from core.gen import generate

PROGRESS = re.compile(r"^(\d+)/(\d+) tokens, [\d.]+ s$")


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the CLI loads a model."""

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded for an argument or path error")

    monkeypatch.setattr(backends, "load_model", refuse)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# arguments: refused with a sentence, before the model loads


@pytest.mark.parametrize("argv, flag", [
    (["trace", "hi", "--max-tokens", "-5"], "--max-tokens"),
    (["trace", "hi", "--max-tokens", "0"], "--max-tokens"),
    (["trace", "hi", "--max-tokens", "100000"], "--max-tokens"),
    (["generate", "hi", "--top-k", "-3"], "--top-k"),
    (["generate", "hi", "--top-p", "0"], "--top-p"),
    (["generate", "hi", "--top-p", "-1"], "--top-p"),
    (["generate", "hi", "--top-p", "1.5"], "--top-p"),
    (["generate", "hi", "--temperature", "nan"], "--temperature"),
    (["generate", "hi", "--temperature", "inf"], "--temperature"),
    (["generate", "hi", "--temperature", "-1"], "--temperature"),
    (["generate", "hi", "--steps", "0"], "--steps"),
    (["generate", "hi", "--seed", "-1"], "--seed"),
    (["generate", "hi", "--steps", "many"], "--steps"),
])
def test_bad_argument_is_one_sentence_before_loading(argv, flag, no_model, capsys, tmp_path):
    rc = cli.main([*argv, "--model", "toy", "-o", str(tmp_path / "x.npz")])  # no_model: refused before any load
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert flag in line and line.endswith(".") and line.count(flag) == 1, line
    assert not (tmp_path / "x.npz").exists()


def test_max_tokens_names_the_trace_limit(no_model, capsys):
    assert cli.main(["trace", "hi", "--max-tokens", "0"]) == 2
    from core.engine.trace import MAX_TOKENS

    assert str(MAX_TOKENS) in _one_error_line(capsys.readouterr().err)


def test_empty_prompt_is_refused_before_loading(no_model, capsys, tmp_path):
    assert cli.main(["trace", "  ", "-o", str(tmp_path / "x.npz")]) == 2
    assert "empty" in _one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------
# the output path: checked first, reported exactly as written


def _refused_path(out: str, capsys) -> str:
    """Its callers take no_model: the path is refused before any model loads (how fast: tests/benchmarks/bench_refusals.py)."""
    rc = cli.main(["trace", "hi", "--model", "toy", "-o", out])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and out in line, line
    return line


def test_output_in_a_missing_folder(no_model, capsys):
    line = _refused_path("/nonexistent/x.npz", capsys)
    assert "/nonexistent does not exist" in line


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs /sys")
def test_output_where_nothing_can_be_created(no_model, capsys):
    _refused_path("/sys/x.npz", capsys)
    assert not Path("/sys/x.npz").exists()


def test_output_is_an_existing_folder(no_model, capsys, tmp_path):
    line = _refused_path(str(tmp_path), capsys)
    assert "is a folder" in line
    assert not Path(str(tmp_path) + ".npz").exists()
    assert list(tmp_path.iterdir()) == []


def test_output_under_a_file(no_model, capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    line = _refused_path(str(tmp_path / "f" / "x.npz"), capsys)
    assert "is not a folder" in line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_disk_full_is_one_line_and_no_new_file(capsys):
    existed = Path("/dev/full.npz").exists()
    rc = cli.main(["trace", "hi", "--model", "toy", "-o", "/dev/full"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "/dev/full" in line and "space" in line.lower(), line
    assert existed or not Path("/dev/full.npz").exists()


def test_the_file_written_is_the_path_given(capsys, tmp_path):
    """numpy appends .npz to a name without it: the CLI used to report ``out`` and write ``out.npz``."""
    out = tmp_path / "trace_without_suffix"
    assert cli.main(["trace", "hi", "--model", "toy", "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: ")
    assert out.is_file() and not Path(str(out) + ".npz").exists()
    with np.load(out) as z:
        assert json.loads(str(z["meta"]))["prompt"] == "hi"


def test_a_failed_write_is_a_sentence_and_leaves_no_file(tmp_path):
    out = tmp_path / "x.npz"

    def full(f):
        f.write(b"PK")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(cli.CliError, match=re.escape(f"Could not write {out}: No space left on device.")):
        cli.write_output(str(out), full)
    assert not out.exists()


def test_model_errors_are_one_line_on_stderr(capsys, tmp_path):
    rc = cli.main(["generate", "hi", "--model", str(tmp_path / "no_such_model"), "-o", str(tmp_path / "g.npz")])
    assert rc == 2
    _one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------
# long runs: the cap, the progress lines, Ctrl-C


def test_huge_steps_are_capped_by_the_context_with_progress(tiny_dirs, capsys, tmp_path):
    out = tmp_path / "g.npz"
    rc = cli.main(["generate", "Hello there", "--steps", "100000", "--model", str(tiny_dirs["llama"]), "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "Traceback" not in cap.err
    with np.load(out) as z:
        meta = json.loads(str(z["meta"]))
        n, T = len(z["token_ids"]), len(z["prompt_ids"])
    room = 256 - T  # the tiny llama's max_position_embeddings
    assert meta["steps_requested"] == 100000 and meta["steps_at_most"] == room
    assert f"--steps 100000 is more than the model's context leaves after the prompt; generating at most {room} tokens." in cap.err
    assert any(PROGRESS.match(ln) and ln.endswith(" s") and f"/{room} tokens" in ln for ln in cap.err.splitlines()), cap.err
    assert meta["stop_reason"] in ("context", "eos")
    assert n == room if meta["stop_reason"] == "context" else n < room


def test_generate_record_keeps_the_tokens_when_interrupted():
    toy = backends.load_model("toy")
    seen = []

    def on_step(done, total, words):
        seen.append((done, total))
        if done == 4:
            raise KeyboardInterrupt

    rec = generate.generate_record(toy, "hi", 50, progress=on_step, warmup=False)
    meta = json.loads(str(rec["meta"]))
    assert meta["stop_reason"] == "interrupted"
    assert seen == [(i, 50) for i in range(1, 5)]
    for key in ("token_ids", "tokens", "kv_tokens", "kv_bytes", "step_seconds"):
        assert len(rec[key]) == 4, key



def test_a_first_ctrl_c_stops_after_the_pass_in_flight():
    """A real SIGINT (raised in this process at the 3rd pass): nothing is raised into the pass — the flag
    is read after it — so the record keeps exactly 3 tokens; Python's own handler is back afterwards."""
    toy = backends.load_model("toy")
    before = signal.getsignal(signal.SIGINT)

    def on_step(done, total, words):
        if done == 3:
            signal.raise_signal(signal.SIGINT)

    rec = generate.generate_record(toy, "hi", 50, progress=on_step, warmup=False)
    assert json.loads(str(rec["meta"]))["stop_reason"] == "interrupted"
    assert len(rec["token_ids"]) == len(rec["step_seconds"]) == 3
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_stops_inside_the_pass():
    """Two presses: the second raises KeyboardInterrupt where it lands (here, in the progress call after
    the 2nd pass), and the record keeps the 2 tokens whose passes ended."""
    toy = backends.load_model("toy")
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a suite started in the background by sh (make test &)

    def on_step(done, total, words):
        if done == 2:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)

    rec = generate.generate_record(toy, "hi", 50, progress=on_step, warmup=False)
    assert json.loads(str(rec["meta"]))["stop_reason"] == "interrupted"
    assert len(rec["token_ids"]) == len(rec["kv_tokens"]) == 2
    assert signal.getsignal(signal.SIGINT) is before


# ---------------------------------------------------------------------------------------------
# patch (issue 12): activation patching from the command line


PAIR = ["kqzmwpkqzmw", "kqzmwrkqzmw", "--answer", "p", "--foil", "r"]  # the toy's repeated-segment task


@pytest.mark.parametrize("argv, words", [
    (["patch", "", "x", "--answer", "a", "--foil", "b"], "clean prompt is empty"),
    (["patch", "x", "  ", "--answer", "a", "--foil", "b"], "corrupted prompt is empty"),
    (["patch", "x", "y", "--answer", "", "--foil", "b"], "--answer is empty"),
    (["patch", "x", "y", "--answer", "a", "--foil", ""], "--foil is empty"),
    (["patch", "x", "y", "--answer", "a", "--foil", "a"], "same text"),
    (["patch", "x", "y", "--foil", "a"], "--answer"),
])
def test_patch_bad_arguments_before_loading(argv, words, no_model, capsys, tmp_path):
    rc = cli.main([*argv, "-o", str(tmp_path / "p.npz")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and words in line, line
    assert not (tmp_path / "p.npz").exists()


def test_patch_refuses_pairs_and_answers_it_cannot_use(capsys, tmp_path):
    out = tmp_path / "p.npz"
    assert cli.main(["patch", "kqzmwp", "kqzmwpq", "--answer", "p", "--foil", "r", "--model", "toy", "-o", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "different numbers of tokens (7 clean, 8 corrupted)" in line and "same slot" in line
    assert cli.main(["patch", *PAIR[:2], "--answer", " Paris", "--foil", "r", "--model", "toy", "-o", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "is 6 tokens for this model (␣ | P | a | r | i | s)" in line, line
    assert not out.exists()


def test_patch_writes_the_grids_of_the_core(capsys, tmp_path):
    from core.cause import pair, patching

    out = tmp_path / "patch.npz"
    assert cli.main(["patch", *PAIR, "--model", "toy", "-o", str(out), "--heads"]) == 0
    stdout = capsys.readouterr().out
    assert f"wrote {out}" in stdout and "resid: most restored at layer 0, position 6 (100%)" in stdout
    toy = backends.load_model("toy")
    pt = pair.encode_pair(toy.tokenizer, *PAIR[:2])
    ans = pair.answers(toy.tokenizer, "p", "r")
    base = patching.capture(toy, pt.ids_clean, pt.ids_corrupted)
    with np.load(out) as z:
        assert z["tokens_clean"].tolist() == list(pt.tokens_clean) and z["tokens_corrupted"][6] == "r"
        assert float(z["logit_diff_clean"]) == pair.logit_diff(base.clean_logits(), ans.answer, ans.foil)
        assert float(z["logit_diff_corrupted"]) == pair.logit_diff(base.corrupted_logits(), ans.answer, ans.foil)
        for site in patching.BY_POSITION:
            assert z[site].shape == (2, 12)
            np.testing.assert_array_equal(z[site], patching.sweep(toy, base, site, ans.answer, ans.foil))
        assert z["z"].shape == (2, 4)
        # raw logit differences: copying the one differing position at layer 0 restores the clean run, up to
        # float32 rounding (the sweep runs it in a batch): two float32 routes of a logit difference, each within
        # twice floats.assert_as_accurate's allowance A, measured on the toy's unpatched runs against its float64 twin
        import copy

        import floats
        import torch

        twin = copy.deepcopy(toy.model).eval()
        with torch.inference_mode():
            runs = [[m(torch.tensor([list(ids)]))[0][0, -1].double().numpy() for ids in (pt.ids_clean, pt.ids_corrupted)]
                    for m in (twin, copy.deepcopy(twin).double())]
        floats.assert_within(z["resid"][0, 6], float(z["logit_diff_clean"]), 4 * floats.allowed_error(*map(np.array, runs)), what="layer 0, the differing position",
                             why="two float32 routes of a logit difference")
        assert json.loads(str(z["meta"]))["answer"] == "p"
