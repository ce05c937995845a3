"""Class mode in the browser: the teacher's bar and class page, the student's follow bar.

Only the store holds a class (``store.open_store``, one per process): a teacher and her students may run on
different app processes behind nginx. The teacher's browser session holds the class id and the teacher's
secret (``TEACHER``); a student's holds the class id and a random device token (``STUDENT``). app.py calls

* ``arrive()`` before the sidebar: a view the follow bar asked for (the teacher's prompt) is put in place
  before the prompt box is drawn;
* ``bar(stem)`` above every page: the teacher's one-click questions, or the student's follow bar (a timed
  fragment polling the store every ``FOLLOW_S`` s: a new teacher view switches the page, an open question
  shows its answer box);
* ``record(stem)`` after every page of the teacher: the page and its URL parameters go to the store.

Everything a student typed is shown through ``core.common.escape`` or as a table cell / figure label
(``escape.plot``), never as Markdown or HTML.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import socket
import sys
from typing import Any

import numpy as np
import plotly.graph_objects as go
import segno
import streamlit as st
from plotly.subplots import make_subplots

import core.backends as backends
from core.common import escape
from core.gen import diagnose as dg
from core.gen import kvcalc, report
from core.inside import ablation
from core.learn import quiz
from core.plot import palette
from core.web import cache, measure, nav, presenter, ui, widgets
from core.web import receipt as why
from core.web.classroom import questions as cq
from core.web.classroom import store as cs

FOLLOW_S = 1.5  # seconds between two polls of a student's device (the teacher's view shows within ~2 s)
TEACHER = "_class_teacher"  # (class id, secret, code)
STUDENT = "_class_student"  # (class id, device, code)
FOLLOWING = "_class_following"  # the student follows the teacher (False: looking around)
APPLIED = "_class_applied"  # (view version, page) last taken from the teacher
ARRIVE = "_class_arrive"  # URL parameters to put in place at the next run
ANSWERED = "_class_answered"  # question numbers this device has answered
DIAGNOSE_PREFILL = "diagnose_prefill"  # the Diagnose page's prefill curve asked for (pages/diagnose.py: f"{P}_prefill")
WHY = "_class_why"  # the next-token question whose receipt the teacher opened
NOT_FOLLOWED = ("lang", "present", "join")  # each device keeps its own language and projector setting
_HOST = re.compile(r"^[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?$")


@st.cache_resource(show_spinner=False)
def _open() -> cs.ClassStore:
    return cs.open_store()


def the_store() -> cs.ClassStore | None:
    """This process's store, or None with the reason shown (an unreachable Redis, an unreadable setting)."""
    try:
        return _open()
    except Exception as e:  # the operator's setting or server: said on the console, one sentence for the visitor
        print(f"Transformer X-Ray: the class store cannot be opened: {e}", file=sys.stderr)
        st.warning(ui.t("class.err.store"))
        return None


def refused(e: cs.ClassError, where: Any = None) -> None:
    (where or st).warning(ui.t(f"class.err.{e.reason}"))


def role() -> str | None:
    return "teacher" if TEACHER in st.session_state else "student" if STUDENT in st.session_state else None


# --- app.py's three hooks ------------------------------------------------------------------------------

def arrive() -> None:
    """Before the sidebar: the teacher's model, prompt and chat switch, from a view the follow bar switched to.
    The model only by an id this server offers (``Offer.spec``): a path or an unknown id is never loaded, and
    the student keeps their own (also when the teacher uses a folder of their own, which is in no URL)."""
    params = st.session_state.pop(ARRIVE, None)
    if not params:
        return
    wanted = params.get("model")
    spec = ui.offered().spec(wanted)
    if spec is not None and wanted != ui.model_id() and ui.switch_model(wanted, spec):
        st.session_state["model_pick"] = wanted  # the sidebar's menu shows it (and does not switch back)
    if isinstance(params.get("prompt"), str):
        st.session_state["prompt"] = params["prompt"][: ui.MAX_PROMPT_CHARS]
    if params.get("chat") in ("0", "1"):
        st.session_state["chat"] = params["chat"] == "1"


def bar(stem: str | None) -> None:
    """Above the page: the teacher's bar, or the student's follow bar; nothing outside a class."""
    r = role()
    if r == "teacher":
        if stem != "classroom":
            with st.container(border=True):
                _teacher_bar()
    elif r == "student":
        applied = st.session_state.get(APPLIED)
        if applied and stem != applied[1]:
            st.session_state[FOLLOWING] = False  # the student opened another page: looking around
        _follow()


def record(stem: str | None) -> None:
    """After a teacher's page: its page and URL parameters become the class's view."""
    t = st.session_state.get(TEACHER)
    if t is None or stem is None:
        return  # no class: the store is not even opened
    s = _open_quiet()
    if s is None:
        return
    params = {k: v for k, v in st.query_params.to_dict().items() if k not in NOT_FOLLOWED}
    with contextlib.suppress(cs.ClassError):
        s.set_view(t[0], t[1], stem, params)


def _open_quiet() -> cs.ClassStore | None:
    try:
        return _open()
    except Exception:  # said once where the class is used (the_store)
        return None


# --- teacher -------------------------------------------------------------------------------------------

def _teacher_bar() -> None:
    cid, secret, code = st.session_state[TEACHER]
    s = the_store()
    if s is None:
        return
    try:
        n = s.count(cid, secret)
    except cs.ClassError:
        st.session_state.pop(TEACHER, None)
        st.info(ui.t("class.ended_teacher"))
        return
    st.caption(ui.t("class.bar_teacher", code=cs.shown_code(code), n=n))
    ask_buttons(s, cid, secret)
    nav.page_link("classroom", label=ui.t("class.results"), icon="📊")


def ask_buttons(s: cs.ClassStore, cid: str, secret: str) -> None:
    """One click from where the teacher is: the four kinds of question, and closing the open one."""
    cols = st.columns(5)
    if cols[0].button(ui.t("class.ask_next"), icon="❓", key="class_ask_next"):
        _open_next(s, cid, secret)
    with cols[1].popover(ui.t("class.ask_mc"), icon="✅"):
        qid = st.selectbox(ui.t("class.ask_mc_pick"), [q.id for q in quiz.QUESTIONS], key="class_mc_pick",
                           format_func=lambda i: ui.t(f"quiz.{i}.q"))
        if st.button(ui.t("class.open_it"), key="class_ask_mc"):
            _ask(s, cid, secret, "mc", *cq.multiple_choice(qid))
    with cols[2].popover(ui.t("class.ask_number"), icon="🔢"):
        st.caption(ui.t("class.ask_number_kv"))
        tokens = st.selectbox(ui.t("class.ask_number_tokens"), cq.NUMBER_TOKENS, index=1, key="class_num_tokens",
                              format_func=lambda n: f"{n:,}")
        if st.button(ui.t("class.open_it"), key="class_ask_number"):
            loaded = ui.loaded_model()
            if loaded is not None:
                _ask(s, cid, secret, "number", *cq.kv_number(kvcalc.current_shape(loaded.facts), ui.model_label(), tokens))
        st.divider()
        st.caption(ui.t("class.ask_ttft_help"))
        if st.button(ui.t("class.ask_ttft"), key="class_ask_ttft"):
            _open_ttft(s, cid, secret)
    with cols[3].popover(ui.t("class.ask_ablate"), icon="✂️"):
        scope = st.radio(ui.t("class.ask_ablate_scope"), cq.ABLATE_SCOPES, horizontal=True, key="class_abl_scope",
                         format_func=ui.fmt("class.ablate_scope_{}"))
        layer, loaded = 0, ui.loaded_model()
        if scope == "head" and loaded is not None:
            top = loaded.facts.n_layers - 1
            layer = int(st.number_input(ui.t("ui.layer"), 0, top, ui.qp_int("layer", 0, 0, top), key="class_abl_layer"))
        if st.button(ui.t("class.open_it"), key="class_ask_ablate"):
            _open_ablate(s, cid, secret, scope, layer)
    try:
        st_ = s.state(cid)
    except cs.ClassError:
        st_ = None
    if st_ is not None and st_.question is not None:
        qn = st_.question.qid
        if cols[4].button(ui.t("class.close", i=qn), icon="⏹️", key="class_close"):
            s.close_question(cid, secret, qn)
            st.rerun()


def _open_next(s: cs.ClassStore, cid: str, secret: str) -> None:
    tr = ui.current_trace()
    loaded = ui.loaded_model() if tr is not None else None
    if tr is None or loaded is None:
        st.warning(ui.t("class.err.no_trace"))
        return
    last = tr.n_tokens - 1
    _, lens_p, lens_t = cache.get_lens(tr, last, last + 1)  # how the answer formed: every layer's best guess
    public, answer, blob = cq.next_token(loaded.tokenizer, ui.prompt(), tr.text, tr.last_probs(),
                                         lens=(lens_t, lens_p[:, 0].tolist()))
    answer["again"] = cq.retrace(ui.model_id(), ui.prompt(), ui.chat())
    _ask(s, cid, secret, "next", public, answer, blob)


def _open_ttft(s: cs.ClassStore, cid: str, secret: str) -> None:
    """The Diagnose page's exercise (TTFT 2K → 20K) from the prefill curve this session measured there."""
    loaded = ui.loaded_model()
    got = st.session_state.get(DIAGNOSE_PREFILL)  # (model spec, lengths, run): the Diagnose page's last press
    pts = None
    if loaded is not None and got and got[0] == loaded.spec:
        pts = measure.show(cache.diagnose_prefill(loaded, got[1], got[2]), quiet=True)
    if not pts:
        st.warning(ui.t("class.err.no_curve"))
        nav.page_link("diagnose", label=ui.t("class.measure_link"), icon="⏱️", query={"symptom": "slow_first"})
        return
    ex = dg.exercise(pts, loaded.facts.max_positions)
    _ask(s, cid, secret, "ttft", *cq.ttft_number(ex, ui.model_label(), loaded.facts.max_positions))


def _open_ablate(s: cs.ClassStore, cid: str, secret: str, scope: str, layer: int) -> None:
    """The ablation page's own numbers for the current prompt, once: each head of ``layer`` zeroed alone (its
    sweep, ``cache.layer_sweep``) or each layer's attention zeroed (its metric's KL, ``cache.probs``)."""
    tr = ui.current_trace()
    loaded = ui.loaded_model() if tr is not None else None
    if tr is None or loaded is None:
        st.warning(ui.t("class.err.no_trace"))
        return
    if not backends.is_hf(loaded):
        st.info(ui.t("ablation.needs_hf"))
        return
    if ablation.too_long(tr.n_tokens):
        st.warning(ui.t("ablation.too_long", n=tr.n_tokens, k=ablation.MAX_TOKENS))
        return
    ids = tuple(int(i) for i in tr.token_ids)
    with st.spinner(ui.t("class.ablating")):
        if scope == "head":
            names, kl = ablation.head_names(tr.n_heads), cache.layer_sweep(loaded, ids, layer).tolist()
        else:
            before = cache.probs(loaded, ids, ())
            names = [f"L{i}" for i in range(tr.n_layers)]
            kl = [ablation.effect(before, cache.probs(loaded, ids, ablation.Target(i, 0, "layer").ablate)).kl
                  for i in range(tr.n_layers)]
    _ask(s, cid, secret, "ablate", *cq.ablate(ui.prompt(), scope, layer, names, kl))


def _ask(s: cs.ClassStore, cid: str, secret: str, kind: str, public: dict, answer: dict, blob: bytes) -> None:
    try:
        s.open_question(cid, secret, kind, public, answer, blob)
    except cs.ClassError as e:
        refused(e)
        return
    st.rerun()


def start_button(s: cs.ClassStore) -> None:
    st.divider()
    if st.button(ui.t("class.start"), icon="🧑‍🏫", help=ui.t("class.start_help"), key="class_start"):
        try:
            c = s.start()
        except cs.ClassError as e:
            refused(e)
            return
        st.session_state[TEACHER] = (c.cid, c.secret, c.code)
        st.rerun()


def join_address(code: str) -> tuple[str, str | None]:
    """(the address students open, the LAN address used when the teacher's browser is on this machine)."""
    host = ""
    with contextlib.suppress(Exception):  # no request headers (AppTest): this machine's address
        host = st.context.headers.get("Host") or ""
    if not _HOST.match(host):
        host = "localhost:8501"
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name:
        name, port = host, ""
    lan = None
    if name in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0"):
        lan = lan_ip()
        name = lan or name
    url = f"http://{name}{':' + port if port else ''}/classroom?join={code}"
    return url, lan


def lan_ip() -> str | None:
    """This machine's address on its network (the interface of the default route; no packet is sent)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.connect(("10.255.255.255", 1))
        ip = u.getsockname()[0]
        return None if ip.startswith("127.") else ip
    return None


def qr_png(url: str) -> bytes:
    buf = io.BytesIO()
    segno.make(url, error="m").save(buf, kind="png", scale=10, border=2)
    return buf.getvalue()


def teacher_page(s: cs.ClassStore) -> None:
    cid, secret, code = st.session_state[TEACHER]
    try:
        row = s.teacher(cid, secret)
    except cs.ClassError:
        st.session_state.pop(TEACHER, None)
        st.info(ui.t("class.ended_teacher"))
        return
    url, lan = join_address(code)
    left, right = st.columns([3, 2])
    left.markdown(f"### {ui.t('class.code_big')}")
    left.markdown(f'<p class="xr-classcode" style="font-size:4.5rem;font-weight:700;letter-spacing:0.08em;margin:0">'
                  f"{cs.shown_code(code)}</p>", unsafe_allow_html=True)  # the code is our own alphabet's characters
    left.markdown(ui.t("class.address"))
    left.markdown(f'<p style="font-size:2rem;font-family:monospace;word-break:break-all">{escape.plot(url)}</p>',
                  unsafe_allow_html=True)  # the host comes from the request: escaped
    if lan:
        left.caption(ui.t("class.lan_note", host=escape.md(lan)))
    right.image(qr_png(url), width=320, caption=ui.t("class.qr_alt", url=escape.md(url)))
    a, b, c = st.columns(3)
    a.metric(ui.t("class.count", n=""), s.count(cid, secret))
    names = b.toggle(ui.t("class.names"), value=bool(row["names"]), key="class_names")
    if names != bool(row["names"]):
        s.set_names(cid, secret, names)
    if c.button(ui.t("class.end"), icon="⏹️", key="class_end", type="secondary"):
        s.end(cid, secret)
        st.session_state.pop(TEACHER, None)
        st.rerun()
    st.caption(ui.t("class.expires", time=dt.datetime.fromtimestamp(row["expires"], dt.UTC).strftime("%H:%M")))
    st.subheader(ui.t("class.ask"))
    ask_buttons(s, cid, secret)
    _results(s, cid, secret)


@st.fragment(run_every=2.0)
def _results(s: cs.ClassStore, cid: str, secret: str) -> None:
    """Every question, newest first, with its answers (refreshed while the teacher watches)."""
    try:
        qs = s.questions(cid, secret)
        names = bool(s.teacher(cid, secret)["names"])
    except cs.ClassError:
        return
    if not qs:
        st.info(ui.t("class.no_questions"))
        return
    rows = [(q, s.votes(cid, secret, q.qid)) for q in qs]
    st.download_button(ui.t("class.csv"), cq.csv_bytes(rows, names), file_name="class-answers.csv", mime="text/csv",
                       key="class_csv", on_click="ignore")
    for q, votes in reversed(rows):
        st.markdown(f"#### {ui.t('class.q_title', i=q.qid, kind=ui.t(f'class.kind.{q.kind}'))}")
        st.caption(ui.t("class.state_open" if q.open else "class.state_closed", n=len(votes)))
        question_text(q)
        if q.open:
            continue
        if not votes:
            st.caption(ui.t("class.no_answers"))
        elif q.kind == "next":
            _reveal_next(s, cid, secret, q, votes)
        elif q.kind == "mc":
            _reveal_mc(q, votes)
        elif q.kind in ("number", "ttft"):
            _reveal_number(q, votes)
        elif q.kind == "ablate":
            _reveal_ablate(q, votes)


def question_text(q: cs.Question, where: Any = None) -> None:
    """The question as every device shows it, in its own language."""
    w = where or st
    if q.kind == "next":
        w.markdown(ui.t("class.q_next") + (" " + ui.t("class.q_next_cut") if q.public.get("cut") else ""))
        w.code(q.public.get("prompt", ""), language=None, wrap_lines=True)  # a code block: never rendered
    elif q.kind == "mc":
        w.markdown(ui.t(f"quiz.{q.public['id']}.q"))
    elif q.kind == "ablate":
        p = q.public
        w.markdown(ui.t(f"class.q_ablate_{p['scope']}", layer=p["layer"]) + (" " + ui.t("class.q_next_cut") if p.get("cut") else ""))
        w.code(p.get("prompt", ""), language=None, wrap_lines=True)  # a code block: never rendered
    elif q.kind == "ttft":
        p = q.public
        w.markdown(ui.t("class.q_ttft", model=escape.md(p["model"]), t0=f"{p['from']:,}", t1=f"{p['to']:,}"))
    elif q.kind == "number":
        p = q.public
        w.markdown(ui.t("class.q_number", model=escape.md(p["model"]), tokens=f"{p['tokens']:,}", layers=p["layers"],
                        kv_heads=p["kv_heads"], head_dim=p["head_dim"]))


def _bar_figure(labels: list[str], counts: list[int], title: str, hi: int | None = None) -> go.Figure:
    colours = [palette.colour("second") if i == hi else palette.colour("main") for i in range(len(labels))]
    f = go.Figure(go.Bar(x=counts, y=escape.plot_all(labels), orientation="h", marker_color=colours, text=counts,
                         textposition="outside"))
    f.update_layout(title=title, height=120 + 36 * len(labels), yaxis=dict(autorange="reversed"),
                    xaxis_title=ui.t("class.col_n"), margin=dict(l=10, r=30, t=60, b=40))
    return f


def _reveal_next(s: cs.ClassStore, cid: str, secret: str, q: cs.Question, votes: list[cs.Vote]) -> None:
    loaded = ui.loaded_model()
    probs = np.frombuffer(s.blob(cid, secret, q.qid), dtype=np.float32)
    guesses = cq.tally_next(loaded.tokenizer, q, votes, probs)
    n = sum(g.n for g in guesses)
    st.markdown(ui.t("class.hits", top1=cq.hits(guesses, 1), top5=cq.hits(guesses, 5), n=n))
    left, right = st.columns(2)
    with left:
        top = q.answer["top"][:12]
        presenter.chart(_bar_figure([g.text for g in guesses[:12]], [g.n for g in guesses[:12]], ui.t("class.fig_guesses"),
                                    hi=next((i for i, g in enumerate(guesses[:12]) if g.rank == 1), None)),
                        key=f"class_fig_{q.qid}")
        presenter.frame([{ui.t("class.col_guess"): g.text, ui.t("class.col_pieces"): " | ".join(g.pieces),
                          ui.t("class.col_n"): g.n, ui.t("class.col_p_first"): f"{g.p:.4f}", ui.t("class.col_rank"): g.rank}
                         for g in guesses], hide_index=True)
    with right:
        st.markdown(ui.t("class.model_top", k=len(top)))
        presenter.frame([{ui.t("class.col_token"): piece, ui.t("class.col_p"): f"{p:.4f}"} for _, piece, p in top],
                        hide_index=True)
    lens = q.answer.get("lens") or []
    if lens:
        f = go.Figure(go.Scatter(x=list(range(len(lens))), y=[p for _, p in lens], mode="lines+markers+text",
                                 text=escape.plot_all([t for t, _ in lens]), textposition="top center",
                                 line=palette.line("main"), marker=palette.marker("main")))
        f.update_layout(title=ui.t("class.fig_lens"), height=340, xaxis_title=ui.t("class.lens_x"),
                        yaxis_title=ui.t("class.lens_y"), yaxis_range=[0, 1.1], margin=dict(t=60, b=50))
        presenter.chart(f, key=f"class_lens_{q.qid}")
        st.caption(ui.t("class.lens_caption", last=len(lens) - 1))
    _why(loaded, q)


def _why(loaded: Any, q: cs.Question) -> None:
    """One click: the receipt of the model's top token for the question's prompt (``core.web.receipt``), traced
    again with the model it was asked with (no button when the teacher has switched model or the prompt was
    too long to keep)."""
    again = q.answer.get("again")
    if not again or again["model"] != ui.model_id():
        return
    tr = ui.current_trace(again["prompt"], chat_mode=again["chat"])
    if tr is None or int(np.argmax(tr.last_logits)) != q.answer["top"][0][0]:
        return
    if why.button(tuple(tr.key), tr.n_tokens - 1, None, q.answer["top"][0][1], key=f"class_why_{q.qid}", link=False):
        st.session_state[WHY] = q.qid
    if st.session_state.get(WHY) == q.qid:  # one question's receipt at a time
        why.panel(loaded, tr)


def _reveal_mc(q: cs.Question, votes: list[cs.Vote]) -> None:
    counts = cq.tally_mc(q, votes)
    labels = [ui.t(f"quiz.{q.public['id']}.o{i}") for i in range(len(counts))]
    presenter.chart(_bar_figure(labels, counts, ui.t("class.fig_options"), hi=q.answer["correct"]), key=f"class_fig_{q.qid}")
    st.success(ui.t("class.correct", option=escape.md(labels[q.answer["correct"]])))
    st.markdown(ui.t(f"quiz.{q.public['id']}.why"))


def _reveal_ablate(q: cs.Question, votes: list[cs.Vote]) -> None:
    """The room's picks beside the measured effect of zeroing each choice (the ablation page's KL)."""
    counts, names, kl = cq.tally_mc(q, votes), q.public["names"], q.answer["kl"]
    if not sum(counts):  # votes that name no choice (sent around the page) are not counted
        st.caption(ui.t("class.no_answers"))
        return
    a = cq.ablated(q, counts)
    f = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                      subplot_titles=(ui.t("class.fig_picks"), ui.t("class.fig_kl")))
    colours = [palette.colour("second") if i == a.best else palette.colour("main") for i in range(len(names))]
    f.add_trace(go.Bar(x=counts, y=names, orientation="h", marker_color=colours, text=counts, textposition="outside"), 1, 1)
    f.add_trace(go.Bar(x=kl, y=names, orientation="h", marker_color=colours, text=[f"{x:.3g}" for x in kl],
                       textposition="outside"), 1, 2)
    f.update_layout(height=140 + 26 * len(names), showlegend=False, yaxis=dict(autorange="reversed", type="category"),
                    margin=dict(l=10, r=30, t=60, b=40))
    f.update_xaxes(title_text=ui.t("class.col_n"), row=1, col=1)
    f.update_xaxes(title_text=ui.t("class.kl_x"), row=1, col=2)
    presenter.chart(f, key=f"class_fig_{q.qid}")
    st.markdown(ui.t("class.ablate_answer", best=names[a.best], kl=f"{kl[a.best]:.3g}", n_best=a.n_best, n=sum(counts),
                     fav=names[a.favourite], rank=a.favourite_rank, of=len(names), kl_fav=f"{kl[a.favourite]:.3g}"))
    nav.page_link("ablation", label=ui.t("class.ablate_link"), icon="✂️",
                  query={"layer": str(q.public["layer"] if q.public["scope"] == "head" else a.best),
                         "head": str(a.best if q.public["scope"] == "head" else 0)})


def _reveal_number(q: cs.Question, votes: list[cs.Vote]) -> None:
    """The room's spread beside the value: the KV formula's MB, or the TTFT factor read off the measured curve
    (said as the Diagnose page says it: an extrapolation past the longest input measured)."""
    xs, spread = cq.tally_number(q, votes)
    truth, kv = cq.truth(q), q.kind == "number"
    f = go.Figure(go.Box(x=xs, name="", boxpoints="all", marker_color=palette.colour("main"), orientation="h"))
    f.add_vline(x=truth, line=palette.line("accent", width=3), annotation_text=ui.t("class.computed" if kv else "class.fitted"))
    f.update_layout(title=ui.t("class.fig_number" if kv else "class.fig_ttft"), height=260, xaxis_type="log",
                    xaxis_title="MB" if kv else "×", margin=dict(t=60, b=50))
    presenter.chart(f, key=f"class_fig_{q.qid}")
    if not kv:
        ex = cq.exercise_of(q)
        st.markdown(report.exercise_prefill_text(ex, ui.lang()))
        ui.badge("measured", report.extrapolated_note(ex, ui.lang()))
    if spread is not None:
        def g(x: float) -> str:
            return f"{x:,.4g}"
        room = dict(median=g(spread.median), q1=g(spread.q1), q3=g(spread.q3), lo=g(spread.lo), hi=g(spread.hi),
                    close=spread.within_2x, n=spread.n)
        st.markdown(ui.t("class.number_answer", mb=g(truth), bytes=f"{q.answer['bytes']:,}", **room) if kv
                    else ui.t("class.ttft_room", x=g(truth), **room))


# --- student -------------------------------------------------------------------------------------------

def join_form(s: cs.ClassStore) -> None:
    st.subheader(ui.t("class.join_title"))
    typed = st.query_params.get("join", "")
    with st.form("class_join", border=True):
        code = st.text_input(ui.t("class.code"), value=cs.shown_code(typed) if cs.normal_code(typed) else "",
                             max_chars=3 * cs.CODE_LEN, key="class_code")
        nick = st.text_input(ui.t("class.nickname"), max_chars=s.limits.nickname_chars, key="class_nick")
        if st.form_submit_button(ui.t("class.join"), type="primary"):
            device = st.session_state.setdefault("_class_device", cs.new_device())
            try:
                cid = s.join(code, device, nick)
            except cs.ClassError as e:
                refused(e)
                return
            st.session_state[STUDENT] = (cid, device, cs.normal_code(code))
            st.session_state[FOLLOWING] = True
            st.session_state.pop(APPLIED, None)
            st.query_params.pop("join", None)
            st.rerun()


def student_page() -> None:
    code = st.session_state[STUDENT][2]
    st.success(ui.t("class.joined", code=cs.shown_code(code)))
    if st.button(ui.t("class.leave"), key="class_leave"):
        for k in (STUDENT, FOLLOWING, APPLIED, ANSWERED):
            st.session_state.pop(k, None)
        st.rerun()


@st.fragment(run_every=FOLLOW_S)
def _follow() -> None:
    """The student's bar: follows the teacher's view, shows the open question."""
    if STUDENT not in st.session_state:
        return
    cid, device, code = st.session_state[STUDENT]
    s = _open_quiet()
    state = s.state(cid) if s is not None else None
    if state is None:
        for k in (STUDENT, FOLLOWING, APPLIED):
            st.session_state.pop(k, None)
        st.info(ui.t("class.ended"))
        return
    following = st.session_state.get(FOLLOWING, True)
    view = state.view
    page = view.get("page")
    applied = st.session_state.get(APPLIED)
    if following and page in nav.STEMS and (applied is None or applied[0] != state.view_version):
        params = {str(k): str(v) for k, v in view.get("params", {}).items() if k not in NOT_FOLLOWED}
        params["lang"] = ui.lang()
        st.session_state[APPLIED] = (state.view_version, page)
        st.session_state[ARRIVE] = params
        st.switch_page(f"pages/{page}.py", query_params=params)
    with st.container(border=True):
        cols = st.columns([3, 2])
        cols[0].caption(ui.t("class.following" if following else "class.looking", code=cs.shown_code(code)))
        if not following and cols[1].button(ui.t("class.back"), key="class_back", type="primary"):
            st.session_state[FOLLOWING] = True
            st.session_state.pop(APPLIED, None)
            st.rerun(scope="fragment")
        if state.question is not None:
            if state.question.qid in st.session_state.get(ANSWERED, ()):
                st.caption(ui.t("class.sent"))
            else:
                _answer_box(s, cid, device, state.question)


def _answer_box(s: cs.ClassStore, cid: str, device: str, q: cs.Question) -> None:
    st.markdown(f"**{ui.t('class.q_title', i=q.qid, kind=ui.t(f'class.kind.{q.kind}'))}**")
    question_text(q)
    with st.form(f"class_answer_{q.qid}", border=False):
        if q.kind in ("mc", "ablate"):
            options = ([ui.t(f"quiz.{q.public['id']}.o{i}") for i in range(int(q.public["n"]))] if q.kind == "mc"
                       else [widgets.code(str(x)) for x in q.public["names"]])
            pick = st.radio(ui.t("class.your_answer"), range(len(options)), index=None, key=f"class_pick_{q.qid}",
                            format_func=options.__getitem__, horizontal=q.kind == "ablate")
            text = "" if pick is None else str(pick)
        else:
            text = st.text_input(ui.t("class.your_answer"), max_chars=s.limits.answer_chars, key=f"class_text_{q.qid}",
                                 placeholder=ui.t(f"class.q_{q.kind}_hint") if q.kind in ("number", "ttft") else None)
        if st.form_submit_button(ui.t("class.send"), type="primary"):
            if q.kind in ("number", "ttft") and cq.parse_number(text) is None:
                st.warning(ui.t("class.bad_number" if q.kind == "number" else "class.bad_ratio"))
                return
            try:
                s.vote(cid, q.qid, device, text)
            except cs.ClassError as e:
                refused(e)
                if e.reason != "voted":
                    return
            st.session_state.setdefault(ANSWERED, set()).add(q.qid)
            st.success(ui.t("class.sent"))
