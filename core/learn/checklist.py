"""The printable self-check list: what a student should be able to explain after the app, each point
mapped to the pages that show it. The wording lives in ``assets/i18n/learn.json``
(``checklist.<key>``); here each point has only its key and its pages (stems of ``core.web.nav.PAGES``).
``markdown`` gives the list as plain Markdown text (a download, printed as it is)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Translate = Callable[[str], str]


@dataclass(frozen=True)
class Point:
    key: str  # checklist.<key>
    pages: tuple[str, ...]  # the pages that show it, the main one first

    def __post_init__(self) -> None:
        if not self.pages:
            raise ValueError(f"checklist point {self.key} names no page")


POINTS: tuple[Point, ...] = (
    Point("tokens", ("tokens",)),
    Point("embeddings", ("tokens", "context")),
    Point("attention", ("attention_lab", "heads")),
    Point("mask", ("masks",)),
    Point("multihead", ("multihead",)),
    Point("heads", ("heads", "ablation")),
    Point("positions", ("positions",)),
    Point("block", ("residual", "journey")),
    Point("logits", ("logits",)),
    Point("training", ("training",)),
    Point("kv", ("generation", "kv_cache")),
    Point("cost", ("attention_lab", "kv_cache")),
    Point("anatomy", ("anatomy",)),
    Point("chat", ("chat",)),
    Point("cause", ("cause_patching",)),
)


def rows(t: Translate) -> list[tuple[str, list[str]]]:
    """(the point's sentence, the titles of its pages) for every point, in the reader's language."""
    return [(t(f"checklist.{p.key}"), [t(f"page.{s}") for s in p.pages]) for p in POINTS]


def line(t: Translate, i: int, text: str, pages: list[str]) -> str:
    """"3. What Q, K and V are … (pages: Attention calculator, Attention heads)", in the reader's punctuation."""
    return t("checklist.line").format(i=i, text=text, pages=t("checklist.sep").join(pages))


def markdown(t: Translate) -> str:
    """The whole list as Markdown: a title, the intro, one unticked box per point with its pages."""
    lines = [f"# {t('checklist.h')}", "", t("checklist.intro"), ""]
    for i, (text, pages) in enumerate(rows(t), 1):
        lines.append("- [ ] " + line(t, i, text, pages))
    return "\n".join(lines) + "\n"
