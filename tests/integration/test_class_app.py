"""Class mode through the app (AppTest, the embedded model): a teacher starts a class, a student joins by the
code in another session, follows the teacher's page and prompt, answers a multiple-choice and a next-token
question; the reveal counts equal the votes and the model's numbers are the trace's own."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import all_text, app_run
from core.common import i18n, settings
from core.engine import tokens
from core.engine.types import TOY_ID
from core.gen import report
from core.inside import ablation
from core.web import receipt as why
from core.web.classroom import questions as cq
from core.web.classroom import store as cs
from core.web.classroom import view

pytestmark = pytest.mark.integration


@pytest.fixture
def class_store(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.CLASS_STORE, f"sqlite:///{tmp_path}/classes.sqlite3")
    view._open.clear()
    yield
    view._open.clear()


def _submit(at, label_key: str, lang: str = "en"):
    label = i18n.t(label_key, lang)
    return next(b for b in at.button if b.label == label)


def test_teacher_and_student_in_two_sessions(class_store, smol):
    teacher = app_run("classroom")
    teacher.button(key="class_start").click().run()
    cid, secret, code = teacher.session_state[view.TEACHER]
    assert cs.shown_code(code) in all_text(teacher)
    assert "imgs {" in all_text(teacher), "the QR code is drawn as an image"

    student = app_run("classroom", join=code, lang="zh")
    assert student.text_input(key="class_code").value == cs.shown_code(code)
    student.text_input(key="class_nick").set_value("<b>x</b>")
    _submit(student, "class.join", "zh").click().run()
    assert student.session_state[view.STUDENT][0] == cid

    # the teacher moves to the tokens page with a prompt: the student's next poll follows, in Chinese
    teacher.switch_page("pages/tokens.py").run()
    st = cs.open_store().state(cid)
    assert st.view["page"] == "tokens" and "lang" not in st.view["params"]
    student.run()
    assert student.session_state[view.APPLIED][1] == "tokens"
    student.run()
    assert student.query_params["lang"] == ["zh"] or student.query_params["lang"] == "zh"

    # a multiple-choice question opened from the teacher's bar on that page
    teacher.selectbox(key="class_mc_pick").set_value("kv_stores")
    teacher.button(key="class_ask_mc").click().run()
    student.run()
    student.radio(key="class_pick_1").set_value(2)
    _submit(student, "class.send", "zh").click().run()
    assert i18n.t("class.sent", "zh") in all_text(student)
    s = cs.open_store()
    assert [v.answer for v in s.votes(cid, secret, 1)] == ["2"]

    # a next-token question: the model's top-k is the trace's own distribution, stored once
    teacher.button(key="class_ask_next").click().run()
    q = s.questions(cid, secret)[-1]
    assert q.kind == "next" and q.open
    probs = np.frombuffer(s.blob(cid, secret, q.qid), dtype=np.float32)
    assert abs(float(probs.sum()) - 1.0) < 1e-4
    assert [t[0] for t in q.answer["top"]] == np.argsort(-probs, kind="stable")[:cq.TOP_K].tolist()
    student.run()
    student.text_input(key=f"class_text_{q.qid}").set_value(" Paris")
    _submit(student, "class.send", "zh").click().run()
    teacher.button(key="class_close").click().run()
    teacher.switch_page("pages/classroom.py").run()
    assert not teacher.exception and not student.exception
    text = all_text(teacher)
    guesses = cq.tally_next(smol.tokenizer, s.questions(cid, secret)[-1], s.votes(cid, secret, q.qid), probs)
    hits = i18n.t("class.hits", "en", top1=cq.hits(guesses, 1), top5=cq.hits(guesses, 5), n=1)
    assert hits.replace("'", "\\'") in text or hits in text
    assert "(logit lens)" in text and i18n.t("class.correct", option="") in text  # both reveals drawn
    lens = s.questions(cid, secret)[-1].answer["lens"]
    assert len(lens) == smol.facts.n_layers + 1 and lens[-1][1] == pytest.approx(float(probs.max()), abs=1e-5)
    rows = cq.csv_bytes([(x, s.votes(cid, secret, x.qid)) for x in s.questions(cid, secret)], False).decode().splitlines()
    assert len(rows) == 1 + 2 and "name" not in rows[0]
    assert "<b>x</b>" not in text  # names are off: the nickname is nowhere on the teacher's page


def test_a_wrong_code_says_so_and_every_page_works_without_a_class(class_store):
    at = app_run("classroom")
    at.text_input(key="class_code").set_value("ZZZZ-ZZZZ")
    _submit(at, "class.join").click().run()
    assert i18n.t("class.err.bad_code") in all_text(at)
    assert view.STUDENT not in at.session_state
    assert not at.exception


def test_which_head_or_layer_matters_reveals_the_ablation_pages_numbers(class_store, smol):
    teacher = app_run("classroom")
    teacher.button(key="class_start").click().run()
    cid, secret, code = teacher.session_state[view.TEACHER]
    student = app_run("classroom", join=code)
    _submit(student, "class.join").click().run()
    teacher.switch_page("pages/tokens.py").run()
    enc = tokens.encode(smol.tokenizer, teacher.session_state["prompt"], chat=teacher.session_state["chat"],
                        max_positions=smol.facts.max_positions)
    before = ablation.next_token_probs(smol, enc.ids)
    s = cs.open_store()

    # the heads of layer 2: the ablation page's sweep of that layer (cache.layer_sweep: one batched pass)
    teacher.number_input(key="class_abl_layer").set_value(2)
    teacher.button(key="class_ask_ablate").click().run()
    q = s.questions(cid, secret)[-1]
    assert q.kind == "ablate" and q.public["names"] == ablation.head_names(smol.facts.n_heads)
    swept = ablation.sweep_heads(smol, enc.ids, [2])[0]
    assert q.answer["kl"] == [ablation.kl_divergence(before, a) for a in swept]  # the same route: the same floats

    # the layers' attention: the page's metric with scope "layer", each layer in turn
    teacher.radio(key="class_abl_scope").set_value("layer")
    teacher.button(key="class_ask_ablate").click().run()
    q = s.questions(cid, secret)[-1]
    assert q.public["n"] == smol.facts.n_layers and q.public["scope"] == "layer"
    page = [ablation.effect(before, ablation.next_token_probs(smol, enc.ids, ablation.Target(i, 0, "layer").ablate)).kl
            for i in range(smol.facts.n_layers)]
    assert q.answer["kl"] == page
    student.run()
    student.radio(key=f"class_pick_{q.qid}").set_value(5)
    _submit(student, "class.send").click().run()
    teacher.button(key="class_close").click().run()
    teacher.switch_page("pages/classroom.py").run()
    assert not teacher.exception and not student.exception
    counts = cq.tally_mc(q, s.votes(cid, secret, q.qid))
    a = cq.ablated(q, counts)
    assert counts[5] == 1 and a.favourite == 5
    said = i18n.t("class.ablate_answer", "en", best=f"L{a.best}", kl=f"{page[a.best]:.3g}", n_best=a.n_best, n=1, fav="L5",
                  rank=a.favourite_rank, of=smol.facts.n_layers, kl_fav=f"{page[5]:.3g}")
    assert said.replace("'", "\\'") in all_text(teacher) or said in all_text(teacher)


def test_the_room_follows_the_teachers_model_only_among_the_offered_ones(class_store, smol):
    teacher = app_run("classroom")
    teacher.button(key="class_start").click().run()
    cid, secret, code = teacher.session_state[view.TEACHER]
    student = app_run("classroom", join=code)
    _submit(student, "class.join").click().run()
    teacher.selectbox(key="model_pick").set_value(TOY_ID).run()
    teacher.switch_page("pages/tokens.py").run()
    s = cs.open_store()
    assert s.state(cid).view["params"]["model"] == TOY_ID
    student.run()
    student.run()
    assert student.session_state["model_id"] == TOY_ID and student.session_state["model_pick"] == TOY_ID
    assert not student.exception

    # a view naming a path or an unknown id (a forged store row): nothing is loaded, the student keeps the toy
    for bad in ("/etc/passwd", "../models/x", "HuggingFaceTB/SmolLM2-1.7B", "x" * 300):
        s.set_view(cid, secret, "anatomy", {"model": bad})
        student.run()
        student.run()
        assert student.session_state["model_id"] == TOY_ID and student.session_state["model_spec_ok"] == TOY_ID
    assert not student.exception



def test_after_a_next_token_reveal_one_click_shows_the_receipt_of_the_models_top_token(class_store, smol):
    teacher = app_run("classroom")
    teacher.button(key="class_start").click().run()
    cid, secret, code = teacher.session_state[view.TEACHER]
    teacher.switch_page("pages/tokens.py").run()
    teacher.button(key="class_ask_next").click().run()
    s = cs.open_store()
    q = s.questions(cid, secret)[-1]
    assert q.answer["again"] == {"model": teacher.session_state["model_id"], "prompt": teacher.session_state["prompt"],
                                 "chat": teacher.session_state["chat"]}
    device = cs.new_device()
    s.join(code, device)
    s.vote(cid, q.qid, device, "the")
    teacher.button(key="class_close").click().run()
    teacher.switch_page("pages/classroom.py").run()
    top_id = q.answer["top"][0][0]
    teacher.button(key=f"class_why_{q.qid}").click().run()
    assert not teacher.exception
    asked = teacher.session_state[why.OPEN]
    assert asked.token is None and teacher.session_state[view.WHY] == q.qid
    text = all_text(teacher)
    assert f"receipt_md_en_{asked.pos}_{top_id}" in text  # the receipt drawn is the top token's, at the last position


def test_ttft_number_is_the_diagnose_pages_exercise_and_its_reveal_says_so(class_store, smol):
    teacher = app_run("classroom")
    teacher.button(key="class_start").click().run()
    cid, secret, code = teacher.session_state[view.TEACHER]
    teacher.switch_page("pages/tokens.py").run()
    teacher.button(key="class_ask_ttft").click().run()  # no curve measured yet: said, nothing opened
    s = cs.open_store()
    assert s.questions(cid, secret) == [] and i18n.t("class.err.no_curve") in all_text(teacher)

    teacher.session_state[view.DIAGNOSE_PREFILL] = (smol.spec, (32, 64, 128), 0)  # as the Diagnose page's button asks
    teacher.button(key="class_ask_ttft").click().run()
    q = s.questions(cid, secret)[-1]
    assert q.kind == "ttft" and q.public["to"] == 20_000
    device = cs.new_device()
    s.join(code, device)
    s.vote(cid, q.qid, device, "×12")
    teacher.button(key="class_close").click().run()
    teacher.switch_page("pages/classroom.py").run()
    said = report.exercise_prefill_text(cq.exercise_of(q), "en")
    assert not teacher.exception and _shown(said, all_text(teacher))

    teacher.switch_page("pages/diagnose.py").run()  # the same curve, said by the Diagnose page's exercise
    teacher.radio(key="diagnose_ex").set_value("phase").run()
    assert not teacher.exception and _shown(said, all_text(teacher))


def _shown(text: str, page: str) -> bool:
    return text in page or text.replace("'", "\\'") in page


def test_the_quiz_question_on_chinese_tokens_holds_on_the_model(smol):
    """quiz.zh_cost says "2加3等于几？" (7 characters) becomes more tokens than characters, some characters in
    several byte-level pieces, while "2", "加" and "3" are a token each: the tokenizer's own split."""
    text = "2加3等于几？"
    ids = smol.tokenizer.encode(text, add_special_tokens=False)
    assert len(text) == 7 and len(ids) > len(text)
    per_char = [len(smol.tokenizer.encode(ch, add_special_tokens=False)) for ch in text]
    assert max(per_char) >= 2 and min(per_char) == 1 and "2加3等于几？" in i18n.t("quiz.zh_cost.q", "zh")
