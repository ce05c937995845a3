"""Class: a teacher starts a class (join code, QR code, address; questions and the room's answers); a student
joins it by code. Following the teacher and answering happen on every page (core/web/classroom/view.py)."""

from __future__ import annotations

from core.web import page
from core.web.classroom import view


def render() -> None:
    s = view.the_store()
    if s is None:
        return
    if view.role() == "teacher":
        view.teacher_page(s)
    elif view.role() == "student":
        view.student_page()
    else:
        view.join_form(s)
        view.start_button(s)


page.run(render)
