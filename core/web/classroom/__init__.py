"""Class mode: a teacher's class that students join by code, follow, and answer.

``store`` (no Streamlit): the shared class state, SQLite or Redis behind one interface — the only place a
class lives, so a teacher and students on different app processes see one class. ``questions`` (no
Streamlit): what a question holds (computed once, when the teacher opens it) and how answers are tallied.
``view``: the teacher's panel, the student's follow bar and the class page's parts (Streamlit).
"""
