"""How a list of chat messages becomes ONE token sequence, and which token ends the answer.

A chat model never sees "messages": ``tokenizer.apply_chat_template`` writes them into one text
with special tokens around every turn (for SmolLM2: ``<|im_start|>role\\n … <|im_end|>``), and the
*generation prompt* (``<|im_start|>assistant\\n``) is appended so the model's next tokens are the
assistant's answer. Generation stops when the model emits the end-of-turn token (``<|im_end|>``,
id 2 for SmolLM2) — the same token that closes every turn in the template.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.engine.tokens import has_chat_template, readable_tokens
from core.engine.types import CodedError, Tokenizer

ROLES = ("system", "user", "assistant")


class NoChatTemplateError(CodedError, ValueError):
    """The tokenizer has no chat template (e.g. the toy's byte tokenizer): i18n key ``chat.err_<code>``."""

    PREFIX = "chat.err_"


@dataclass(frozen=True)
class ChatRendering:
    text: str  # the whole templated text
    segments: list[tuple[str, bool]]  # (piece of text, is a special token), in order; joined = text
    ids: list[int]  # the token ids of text (the template already holds the special tokens)
    tokens: list[str]  # readable piece per id
    special: list[bool]  # per id: a special token?
    generation_prompt: str  # what add_generation_prompt appended (the assistant header)
    n_generation_prompt_tokens: int  # how many of the last ids are that header
    end_token: str | None  # the token that stops generation
    end_token_id: int | None
    system_added: bool  # the template inserted a default system message nobody wrote

    @property
    def n_end_tokens(self) -> int:
        """How many times the end token occurs in the templated ids (once per closed turn)."""
        return sum(1 for i in self.ids if i == self.end_token_id)

    @property
    def generation_prompt_line(self) -> str:
        """The generation prompt on one line, its line breaks shown as ⏎."""
        return self.generation_prompt.replace("\n", "⏎")


def clean_messages(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Keep well-formed messages with a known role (empty contents are allowed: they are real turns)."""
    out = []
    for m in messages:
        role = str(m.get("role", "")).strip().lower()
        if role in ROLES:
            out.append({"role": role, "content": str(m.get("content", ""))})
    return out


MAX_MESSAGES = 32  # rows of the message table the template sees
MAX_CHARS = 20_000  # all the messages' text together: the prompt box's cap


def messages_from_records(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, str]], bool]:
    """Rows of an edited message table (``DataFrame.to_dict("records")``) as messages: a missing role
    becomes "" (dropped later by ``clean_messages``), a missing content the empty turn. At most
    ``MAX_MESSAGES`` rows and ``MAX_CHARS`` characters in all are kept; the flag says whether any were cut."""
    out, left, cut = [], MAX_CHARS, False
    for i, r in enumerate(records):
        if i == MAX_MESSAGES:
            return out, True
        content = "" if pd.isna(r["content"]) else str(r["content"])
        cut = cut or len(content) > left
        out.append({"role": str(r["role"] or ""), "content": content[:left]})
        left -= len(out[-1]["content"])
    return out, cut


def _special_tokens(tokenizer: Tokenizer) -> list[str]:
    toks = set(getattr(tokenizer, "all_special_tokens", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for tok in added.values():
        if getattr(tok, "special", False):
            toks.add(str(tok.content if hasattr(tok, "content") else tok))
    return sorted((t for t in toks if t), key=len, reverse=True)  # longest first for the regex


def split_special(text: str, specials: Sequence[str]) -> list[tuple[str, bool]]:
    """Cut ``text`` into ordinary pieces and special-token pieces, in order."""
    if not specials:
        return [(text, False)] if text else []
    pat = re.compile("|".join(re.escape(s) for s in specials))
    out, pos = [], 0
    for m in pat.finditer(text):
        if m.start() > pos:
            out.append((text[pos : m.start()], False))
        out.append((m.group(0), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def render(tokenizer: Tokenizer, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> ChatRendering:
    """Apply the tokenizer's chat template and take the result apart for display."""
    if not has_chat_template(tokenizer):
        raise NoChatTemplateError("no_template")
    msgs = clean_messages(messages)
    if not msgs:
        raise ValueError("Add at least one message.")
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt)
    bare = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    gen = text[len(bare):] if add_generation_prompt and text.startswith(bare) else ""
    # The template already wrote the special tokens as text: tokenise without adding any more.
    ids = [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    n_gen = len(tokenizer(gen, add_special_tokens=False)["input_ids"]) if gen else 0
    special_ids = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    specials = _special_tokens(tokenizer)
    special_strs = set(specials)
    raw = tokenizer.convert_ids_to_tokens(ids)
    eos = getattr(tokenizer, "eos_token", None)
    eos_id = getattr(tokenizer, "eos_token_id", None)
    has_system = any(m["role"] == "system" for m in msgs)
    return ChatRendering(
        text=text,
        segments=split_special(text, specials),
        ids=ids,
        tokens=readable_tokens(tokenizer, ids),
        special=[(i in special_ids) or (r in special_strs) for i, r in zip(ids, raw)],
        generation_prompt=gen,
        n_generation_prompt_tokens=n_gen,
        end_token=str(eos) if eos is not None else None,
        end_token_id=int(eos_id) if eos_id is not None else None,
        system_added=(not has_system) and text.count("system") > 0 and "system" not in " ".join(m["content"] for m in msgs),
    )
