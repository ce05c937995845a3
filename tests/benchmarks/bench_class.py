"""Class mode under a full room: 100 simulated students in two processes, one teacher, five questions.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_class.py [--students 100] [--questions 5] [--runs 6]

What runs, and why so. A student's device does two things to the class: its follow bar polls the store every
``view.FOLLOW_S`` seconds (``ClassStore.state``), and its answer box sends one vote (``ClassStore.vote``).
Here each student is a thread doing exactly those calls, on the same store code, through the same SQLite
file in WAL mode (or ``--store redis://…``), split over two OS processes as two app processes behind nginx
would be: so the contention between processes on the file is real. Each loop is bounded (a deadline).
The teacher (this process) starts the class, and for each question moves to a new view (``set_view``) and
opens a *guess the next token* question on the real embedded model (``questions.next_token`` on
``backends.trace``), waits for every vote (bounded), closes it and tallies it from the stored distribution.

Printed (last lines):
* ``class_vote_ack_p95_s=`` — a vote's round trip until it is committed (target ≤ 1.0);
* ``class_follow_p95_s=`` — teacher's view committed → a student's poll has it (target ≤ 2.5); the page's
  own redraw on the student's device comes on top (a rerun of that page: see bench_pages for pages' times);
* ``class_forwards_per_question=`` — the model's forward passes per question, counted by a hook on the model
  over opening, 100 votes and the tally (target 1);
* ``class_teacher_ratio=`` — the teacher's page run (AppTest of the tokens page with the teacher's bar and
  view recording) while the 100 students poll and vote, ÷ the same run with no class (medians; the
  baseline is taken before and after the room, in this process) (target ≤ 1.2);
* each process's RSS before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ("The capital of France is", "Water boils at a temperature of", "The opposite of hot is",
           "One, two, three, four,", "The sun rises in the")


def worker(argv: list[str]) -> None:
    """One app process's share of the room: ``n`` student threads, results as JSON on stdout."""
    from core.web.classroom import store as cs  # deferred: the worker is this same file run as a child

    setting, code, first, n, follow_s, until = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4]), float(argv[5])
    s = cs.open_store(setting, cs.Limits(max_students=1000, votes_per_min=1000, joins_per_min=1000))
    seen: list[tuple[int, float]] = []
    acks: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    rss0 = psutil.Process().memory_info().rss

    def student(i: int) -> None:
        device = f"bench-device-{i:08d}"
        rng = np.random.default_rng(i)
        try:
            cid = s.join(code, device, f"s{i}")
        except cs.ClassError as e:
            with lock:
                errors.append(e.reason)
            return
        last, answered = -1, set()
        time.sleep(float(rng.uniform(0, follow_s)))  # devices poll out of step
        while time.time() < until:
            st = s.state(cid)
            if st is None:
                return
            now = time.time()
            if st.view_version != last:
                last = st.view_version
                with lock:
                    seen.append((last, now))
                if st.view.get("page") == "end":
                    return
            q = st.question
            if q is not None and q.qid not in answered:
                time.sleep(float(rng.uniform(0.2, 1.0)))  # typing
                t0 = time.perf_counter()
                try:
                    s.vote(cid, q.qid, device, ["Paris", "hot", "cold", "five", "east", "the"][int(rng.integers(6))])
                    with lock:
                        acks.append(time.perf_counter() - t0)
                except cs.ClassError as e:
                    with lock:
                        errors.append(e.reason)
                answered.add(q.qid)
            time.sleep(follow_s)

    threads = [threading.Thread(target=student, args=(first + i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"seen": seen, "acks": acks, "errors": errors, "rss0": rss0,
                      "rss1": psutil.Process().memory_info().rss}))


def _p95(xs: list[float]) -> float:
    return float(np.percentile(np.asarray(xs), 95)) if xs else float("nan")


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def teacher_runs(at, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        at.run()
        out.append(time.perf_counter() - t0)
        assert not at.exception, at.exception
        assert [h.value for h in at.title][:1] == ["Tokens & embeddings"], "the teacher's page was drawn whole"
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=100)
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--runs", type=int, default=6, help="teacher page runs per phase")
    ap.add_argument("--store", default="", help="XRAY_CLASS_STORE (default: a fresh SQLite file)")
    ap.add_argument("--deadline", type=float, default=300.0)
    a = ap.parse_args()

    from streamlit.runtime.pages_manager import PagesManager  # deferred: only the teacher's side needs Streamlit
    from streamlit.testing.v1 import AppTest  # deferred: as above

    from core import backends  # deferred: as above
    from core.web.classroom import questions as cq  # deferred: as above
    from core.web.classroom import store as cs  # deferred: as above
    from core.web.classroom import view  # deferred: as above

    folder = Path(tempfile.mkdtemp(prefix="bench-class-"))
    setting = a.store or f"sqlite:///{folder}/classes.sqlite3"
    os.environ["XRAY_CLASS_STORE"] = setting  # the child processes read it (core.common.settings)
    me = psutil.Process()
    rss_before = me.memory_info().rss
    s = cs.open_store(setting, cs.Limits(max_students=1000))
    print("note: measured on a machine shared with other work; ratios against a baseline in this process are "
          "what to trust", flush=True)

    # the teacher's page without a class (AppTest: the router, sidebar and tokens page, model and trace cached)
    PagesManager.uses_pages_directory = False
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.switch_page("pages/tokens.py")
    teacher_runs(at, 3)  # warm: the model, the trace, the page's caches
    base1 = teacher_runs(at, a.runs)

    loaded = backends.load_model(None)
    forwards = [0]
    hook = loaded.model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    c = s.start()
    until = time.time() + a.deadline
    half = a.students // 2
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", setting, c.code, str(first), str(n),
                               str(view.FOLLOW_S), str(until)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
             for first, n in ((0, half), (half, a.students - half))]
    t0 = time.time()
    while s.count(c.cid, c.secret) < a.students and time.time() < until:
        time.sleep(0.2)
    print(f"joined: {s.count(c.cid, c.secret)} of {a.students} in {time.time() - t0:.1f} s", flush=True)
    rss_workers0 = [psutil.Process(p.pid).memory_info().rss for p in procs]

    at.session_state[view.TEACHER] = (c.cid, c.secret, c.code)
    commits: dict[int, float] = {}
    per_question: list[int] = []
    room: list[float] = []
    for i in range(a.questions):
        commits[s.set_view(c.cid, c.secret, "tokens", {"step": str(i)})] = time.time()
        f0 = forwards[0]
        tr = backends.trace(loaded, PROMPTS[i % len(PROMPTS)], chat=False)
        qid = s.open_question(c.cid, c.secret, "next", *cq.next_token(loaded.tokenizer, PROMPTS[i % len(PROMPTS)], tr.text,
                                                                        tr.last_probs()))
        room += teacher_runs(at, max(1, a.runs // a.questions + 1))  # the teacher's page while the room answers
        while len(s.votes(c.cid, c.secret, qid)) < a.students and time.time() < until:
            time.sleep(0.2)
        s.close_question(c.cid, c.secret, qid)
        q = s.questions(c.cid, c.secret)[-1]
        guesses = cq.tally_next(loaded.tokenizer, q, s.votes(c.cid, c.secret, qid),
                                np.frombuffer(s.blob(c.cid, c.secret, qid), dtype=np.float32))
        assert sum(g.n for g in guesses) == len(s.votes(c.cid, c.secret, qid))
        per_question.append(forwards[0] - f0)
        print(f"question {qid}: {len(s.votes(c.cid, c.secret, qid))} votes, {per_question[-1]} forward pass(es)", flush=True)
    commits[s.set_view(c.cid, c.secret, "end", {})] = time.time()
    hook.remove()
    results = [json.loads(p.communicate(timeout=a.deadline + 60)[0].strip().splitlines()[-1]) for p in procs]
    s.end(c.cid, c.secret)
    del at.session_state[view.TEACHER]
    base2 = teacher_runs(at, a.runs)

    follow = [t - commits[v] for r in results for v, t in r["seen"] if v in commits]
    acks = [x for r in results for x in r["acks"]]
    errors = [e for r in results for e in r["errors"]]
    base = statistics.median(base1 + base2)
    print(f"votes acknowledged: {len(acks)}; refused: {len(errors)} {sorted(set(errors))}")
    print(f"vote ack: median {statistics.median(acks) * 1e3:.2f} ms, p95 {_p95(acks) * 1e3:.2f} ms, max {max(acks) * 1e3:.2f} ms")
    print(f"follow (store poll): median {statistics.median(follow):.3f} s, p95 {_p95(follow):.3f} s over {len(follow)} views")
    print(f"teacher page run: no class median {base:.3f} s ({statistics.median(base1):.3f} s before the room, "
          f"{statistics.median(base2):.3f} s after; {len(base1 + base2)} runs), with the room median "
          f"{statistics.median(room):.3f} s ({len(room)} runs)")
    for i, (r, r0) in enumerate(zip(results, rss_workers0), 1):
        print(f"memory, student process {i}: {_mib(r['rss0'])} at start, {_mib(r0)} after joining, {_mib(r['rss1'])} at the end")
    print(f"memory, teacher process: {_mib(rss_before)} before, {_mib(me.memory_info().rss)} after (model and AppTest included)")
    print(f"class_vote_ack_p95_s={_p95(acks):.4f}")
    print(f"class_follow_p95_s={_p95(follow):.3f}")
    print(f"class_forwards_per_question={max(per_question) if per_question else float('nan')}")
    print(f"class_teacher_ratio={statistics.median(room) / base:.3f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        raise SystemExit(main())
