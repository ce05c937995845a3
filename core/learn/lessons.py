"""Two prepared 45-minute lessons (one taught in English, one in Chinese) and the self-study order of the
two tutorials' sections, as data.

A lesson ``Route`` is an ordered list of ``Step``s: a page, the minutes to spend on it, and the URL
parameters that open exactly the view the teacher talks about (prompt, chat template, layer, head,
position, tab, pair …, each one a parameter that page reads). What to say, what to ask and the expected
answer are i18n strings (``lessons.<route>.<step>.title / say / ask / answer``), in both languages, so a
teacher can prepare the Chinese lesson from an English UI and the other way round.

One view is not typed by hand: seed 000's 她 → 小红 example opens at the layer, head and query position
read off the model's own attention (``core.learn.examples.best_view``); its step says ``view="she"`` and
the page fills those three parameters in.

The self-study order maps every section of the two tutorials (``SECTIONS``; ``A`` is seed 000, "Transformer
架构：LLM 如何理解 Token 之间的关系？", ``B`` is seed 003, "图解 Transformer 架构：大模型底层原理", numbered as
that tutorial numbers them) to the pages that cover it, and walks the pages in ``ORDER``: the maths by hand
before cause and effect. A section counts as covered once every page it maps to has been opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from core.learn import examples

LESSON_MINUTES = 45
EN_PROMPT = "What is the capital of France?"  # the English UI's first prompt; SmolLM2 answers "The capital of France is Paris."
# The Chinese UI's first prompt (core.web.ui.DEFAULT_PROMPTS["zh"]): of the Chinese questions tried, the one
# SmolLM2 answers right, in digits ("2 + 3 = 5."), inside its chat template.
ZH_PROMPT = "2加3等于几？"
# The Chinese lesson's first step shows the whole loop (the journey's greedy answer, up to journey.MAX_NEW tokens):
# on the bare question SmolLM2 writes "2 + 3 = 5." and runs on in English to the limit; asked for the sum only,
# it writes "2 + 3 = 5." and ends its turn (<|im_end|>), so the step's answer is what the page shows.
ZH_FLOW_PROMPT = ZH_PROMPT + "只回答算式。"
# Each lesson ends on the reveal, "why did it say that?": the receipt (core.web.receipt) of the answer's key
# token, opened on the stepper replaying the greedy answer to that token's step (its link's own format: the run's
# settings, ``step``, and ``why`` = the position the step reads up to, ``why_tok`` = the token). SmolLM2 writes
# "The capital of France is Paris." (" Paris", id 7042, is step 5 after 37 prompt tokens) and "2 + 3 = 5." ("5",
# id 37, is step 6 after 50); tests/integration/test_lessons_integration.py replays both.
EN_WHY = {"greedy": "1", "max": 16, "step": 5, "why": 41, "why_tok": 7042}
ZH_WHY = {"greedy": "1", "max": 16, "step": 6, "why": 55, "why_tok": 37}


@dataclass(frozen=True)
class Step:
    key: str  # i18n: lessons.<route>.<key>.title / .say / .ask / .answer
    page: str  # a core.web.nav.PAGES stem
    minutes: int
    query: tuple[tuple[str, str], ...] = ()  # the view's own parameters (page widgets), beyond prompt and chat
    prompt: str | None = None  # None: the route's prompt
    chat: bool | None = None  # None: the route's chat switch
    view: str | None = None  # "she": layer, head and pos read off the model (examples.best_view)
    # the view the step talks about, which its link opens at the top of the window (core.web.focus): a header's
    # anchor or an element's key on the step's page
    focus: str = ""

    def __post_init__(self) -> None:
        if self.minutes < 1:
            raise ValueError(f"step {self.key}: minutes must be at least 1")
        if not self.focus:
            raise ValueError(f"step {self.key}: no view to open at (focus)")
        if self.view not in (None, "she"):
            raise ValueError(f"step {self.key}: unknown prepared view {self.view!r}")


@dataclass(frozen=True)
class Route:
    key: str  # "en" / "zh": the language the lesson is taught in (its links open the pages in it)
    prompt: str
    chat: bool
    steps: tuple[Step, ...]

    @property
    def minutes(self) -> int:
        return sum(s.minutes for s in self.steps)

    def prompt_of(self, step: Step) -> str:
        return self.prompt if step.prompt is None else step.prompt

    def chat_of(self, step: Step) -> bool:
        return self.chat if step.chat is None else step.chat


def _q(**kw: Any) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in kw.items())


SHE_VIEW = ("layer", "head", "pos")  # the parameters a "she" step takes from examples.best_view

EN = Route("en", EN_PROMPT, True, (
    Step("flow", "journey", 4, _q(layer=15), focus="journey_s2"),
    Step("ids", "tokens", 4, focus="iddist"),
    Step("context", "context", 4, _q(pair="en"), focus="context_fig"),
    Step("formula", "attention_lab", 5, _q(tab="calc"), focus="attention_lab_tab"),
    Step("mask", "masks", 3, _q(layer=0, head=0), focus="masks_fig_causal_grid"),
    Step("sink", "heads", 4, _q(layer=15, head=0, show="layer", hide="0"), focus="heads_grid"),
    Step("gqa", "multihead", 4, _q(layer=15), focus="sharing"),
    Step("block", "residual", 4, _q(layer=15), focus="block"),
    Step("sampling", "logits", 4, _q(temp="0.5"), focus="logits_candidates"),
    Step("training", "training", 3, focus="shift"),
    Step("decode", "generation", 3, _q(greedy="1", max=16), focus="generation_prefill"),
    Step("why", "generation", 3, _q(**EN_WHY), focus="receipt"),
))

ZH = Route("zh", ZH_PROMPT, True, (
    Step("flow", "journey", 4, _q(layer=15), prompt=ZH_FLOW_PROMPT, focus="journey_s7"),
    Step("cost", "tokens", 4, chat=False, focus="chips"),
    Step("apple", "context", 5, _q(pair="zh_ctx"), focus="context_fig"),
    Step("order", "positions", 4, _q(tab="relative"), focus="positions_tab"),
    Step("worked", "attention_lab", 5, _q(tab="calc"), focus="attention_lab_tab"),
    Step("mask", "masks", 3, _q(layer=0, head=0), focus="masks_fig_causal_grid"),
    Step("she", "heads", 5, _q(show="layer", hide="0"), prompt=examples.SHE.prompt, chat=False, view="she", focus="query"),
    Step("gqa", "multihead", 4, _q(layer=15), focus="sharing"),
    Step("block", "residual", 3, _q(layer=15), focus="block"),
    Step("temperature", "logits", 3, _q(temp="0.5"), focus="logits_candidates"),
    Step("prefill", "kv_cache", 2, focus="compare"),
    Step("why", "generation", 3, _q(**ZH_WHY), prompt=ZH_FLOW_PROMPT, focus="receipt"),
))

ROUTES: dict[str, Route] = {r.key: r for r in (EN, ZH)}


def params(route: Route, step: Step, view: examples.View | None = None, present: bool = False) -> dict[str, str]:
    """The URL parameters that open ``step`` exactly: the lesson's language, the prompt, the chat switch,
    the view's own parameters, for a "she" step the layer, head and position of ``view`` (left out when
    the view is unknown: the heads page then offers its example button), the view to open at (``focus``),
    and presenter mode if on."""
    out = {"lang": route.key, "prompt": route.prompt_of(step), "chat": "1" if route.chat_of(step) else "0", **dict(step.query)}
    out["focus"] = step.focus
    if step.view == "she" and view is not None:
        out.update(layer=str(view.layer), head=str(view.head), pos=str(view.query_pos))
    if present:
        out["present"] = "1"
    return out


def fill(step: Step, view: examples.View | None) -> dict[str, str]:
    """The values a step's strings are filled with: for a "she" step, the layer, the head and the weights on
    the target and on the other word, as read off the model (``?`` each when the view is unknown)."""
    if step.view != "she":
        return {}
    if view is None:
        return dict.fromkeys(("l", "h", "t", "o"), "?")
    return {"l": str(view.layer), "h": str(view.head), "t": f"{view.on_target:.0%}", "o": f"{view.on_other:.0%}"}


def href(route: Route, step: Step, view: examples.View | None = None, present: bool = False) -> str:
    """The relative link of ``step`` (``<page>?<parameters>``): opened, it starts a fresh session that
    reads every setting from the URL, so it shows the prepared view, not what this session has changed."""
    return f"{step.page}?" + urlencode(params(route, step, view, present))


# ---------------------------------------------------------------------------------------------
# the self-study order


@dataclass(frozen=True)
class Section:
    id: str  # "A4" (seed 000, the 4th heading) / "B3.2" (seed 003's own numbering); i18n lessons.sec.<id with _ for .>
    pages: tuple[str, ...]  # the pages that cover it
    tabs: tuple[tuple[str, str], ...] = ()  # (page, tab): the tab of one of those pages that covers it (?tab=)

    def __post_init__(self) -> None:
        if any(p not in self.pages for p, _ in self.tabs):
            raise ValueError(f"section {self.id}: a tab of a page it does not list")

    @property
    def key(self) -> str:
        return "lessons.sec." + self.id.replace(".", "_")


SECTIONS: tuple[Section, ...] = (
    Section("A1", ("journey", "tour")),  # 先看完整数据流
    Section("A2", ("context",)),  # Transformer 解决了什么问题？(two 苹果)
    Section("A3", ("references", "norms"), (("norms", "rnn"),)),  # Transformer 出现之前 (RNN, LSTM, GRU)
    Section("A4", ("tokens",)),  # 从 Token ID 到 Token Embedding
    Section("A5", ("tokens", "context")),  # Embedding 是上下文无关的起点
    Section("A6", ("positions",)),  # 为什么需要位置信息？
    Section("A7", ("residual", "anatomy")),  # 一个 Transformer Block 里有什么？
    Section("A8", ("heads",)),  # Self-Attention 是什么？(她 → 小红)
    Section("A9", ("attention_lab", "norms"), (("norms", "qkv"),)),  # Q、K、V 分别是什么？
    Section("A10", ("attention_lab",)),  # Scaled Dot-Product Attention
    Section("A11", ("masks",)),  # 什么是 Causal Mask？
    Section("A12", ("masks",)),  # Padding Mask 与 Causal Mask 不相同
    Section("A13", ("heads", "multihead")),  # 为什么需要 Multi-Head Attention？
    Section("A14", ("multihead", "kv_cache")),  # MHA、MQA 与 GQA
    Section("A15", ("residual", "anatomy")),  # Attention 之后为什么还需要 FFN？
    Section("A16", ("residual",)),  # Residual Connection 有什么作用？
    Section("A17", ("norms", "anatomy"), (("norms", "vector"),)),  # LayerNorm 与 RMSNorm
    Section("A18", ("norms", "residual"), (("norms", "placement"),)),  # Pre-Norm 与 Post-Norm
    Section("A19", ("residual", "journey")),  # 为什么要堆叠很多层？
    Section("A20", ("logits",)),  # 从 Hidden State 到 Logits
    Section("A21", ("masks", "references", "norms"), (("norms", "families"),)),  # 为什么现代文本 LLM 常用 Decoder-only？
    Section("A22", ("masks",)),  # Self-Attention 与 Cross-Attention
    Section("A23", ("generation", "kv_cache")),  # Transformer 与 KV Cache 的关系
    Section("A24", ("training",)),  # 训练与推理时有什么不同？
    Section("A25", ("attention_lab", "long_context")),  # Attention 的计算复杂度
    Section("A26", ("attention_lab",)),  # 实战一：手写 Scaled Dot-Product Attention (seed 42)
    Section("A27", ("toy",)),  # 实战二：实现一个简化 Transformer Block
    Section("A28", ("anatomy",)),  # 实战三：查看真实模型的 Transformer 配置
    Section("A29", ("journey", "kv_cache")),  # 实战四：观察 Hidden States、Attention 和 KV Cache
    Section("A30", ("ablation", "cause_pair", "cause_patching")),  # Attention 权重能解释模型吗？
    Section("A31", ("cause_patching", "cause_attribution")),  # Transformer 的知识存在哪里？
    Section("A32", ("quiz", "decoding")),  # 常见误区
    Section("A33", ("anatomy",)),  # 如何阅读一个真实 LLM 架构？
    Section("A34", ("quiz",)),  # 小结
    Section("B1", ("journey", "tour")),  # 一、先看全局：一句话是怎样穿过模型的？
    Section("B2.1", ("tokens",)),  # 2.1 Token ID 本身没有语义距离
    Section("B2.2", ("positions", "long_context")),  # 2.2 只有词向量，模型分不清顺序
    Section("B3.1", ("attention_lab", "norms"), (("norms", "qkv"),)),  # 3.1 Q、K、V 不是三份输入文本
    Section("B3.2", ("attention_lab",)),  # 3.2 缩放点积注意力分四步
    Section("B3.3", ("attention_lab",)),  # 3.3 用一个小例子看懂权重
    Section("B3.4", ("attention_lab",)),  # 3.4 用 Python 验证手算结果
    Section("B4", ("multihead", "heads")),  # 四、多头注意力
    Section("B5", ("masks", "training")),  # 五、因果 Mask
    Section("B6.1", ("residual",)),  # 6.1 前馈网络负责逐位置改写
    Section("B6.2", ("residual",)),  # 6.2 残差连接保留原信息和梯度通道
    Section("B6.3", ("norms", "residual")),  # 6.3 归一化控制数值尺度
    Section("B7", ("logits", "generation")),  # 七、Decoder-only：下一个 Token 是怎样生成的？
    Section("B8.1", ("generation",)),  # 8.1 Prefill 一次处理完整输入
    Section("B8.2", ("generation",)),  # 8.2 Decode 每轮只处理一个新 Token
    Section("B8.3", ("kv_cache",)),  # 8.3 KV Cache 用显存换重复计算
    Section("B8.4", ("serving", "kv_cache", "decoding")),  # 8.4 三种输入形态对应三种成本
    Section("B9.1", ("diagnose",)),  # 9.1 为什么 RAG 不能把所有资料都塞进去？
    Section("B9.2", ("diagnose", "generation")),  # 9.2 为什么流式输出不能缩短首字之前的全部等待？
    Section("B9.3", ("kv_cache", "chat")),  # 9.3 为什么"记住这句话"不等于长期记忆？
    Section("B10", ("diagnose",)),  # 十、常见错误：从现象定位到根因
    Section("B11", ("quiz",)),  # 十一、如何验收自己真的理解了？
    Section("B12", ("quiz",)),  # 十二、总结
)

# The pages in the order a student working alone should open them: the data flow, inside the real model,
# the maths by hand, then cause and effect (which needs the maths), generation, and checking yourself.
ORDER: tuple[str, ...] = (
    "journey", "tour", "tokens", "context", "positions", "attention_lab", "masks", "heads", "multihead",
    "residual", "anatomy", "toy", "norms", "logits", "ablation", "cause_pair", "cause_patching", "cause_attribution",
    "training", "generation", "kv_cache", "long_context", "serving", "decoding", "chat", "diagnose", "quiz", "references",
)


def sections_at(page: str) -> tuple[Section, ...]:
    """The sections ``page`` covers (part of), in the tutorials' order."""
    return tuple(s for s in SECTIONS if page in s.pages)


def tabs_at(page: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The tabs of ``page`` that sections name, each with those sections' ids, in the tutorials' order."""
    out: dict[str, list[str]] = {}
    for s in SECTIONS:
        for p, tab in s.tabs:
            if p == page:
                out.setdefault(tab, []).append(s.id)
    return tuple((tab, tuple(ids)) for tab, ids in out.items())


def covered(opened: set[str] | frozenset[str]) -> tuple[Section, ...]:
    """The sections whose every page is among ``opened``, in the tutorials' order."""
    return tuple(s for s in SECTIONS if all(p in opened for p in s.pages))


def first_open(opened: set[str] | frozenset[str]) -> str | None:
    """The first page of ``ORDER`` not yet opened: where to go on; None when every page has been."""
    return next((p for p in ORDER if p not in opened), None)
