"""Text → token ids, and token pieces → text a page can show. Written once, used by every page.

* ``encode``: the prompt (optionally wrapped in the chat template) to ids, with the trace limit.
* ``readable_tokens``: each id decoded on its own; a piece that is only part of a UTF-8 character
  (a Chinese character is often 2–3 byte tokens) becomes its bytes, e.g. ``⟨E8 8B⟩``, never ``�``.
* ``visible``: THE label rule — spaces, newlines, tabs and other control characters made visible,
  byte labels kept as they are. ``position_label`` prefixes the position ("3·苹"), so repeated
  tokens stay distinct on a figure's axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.engine.trace import MAX_TOKENS
from core.engine.types import EmptyPromptError

# ---------------------------------------------------------------------------------------------
# GPT-2's byte table


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's reversible byte → printable character table (byte-level BPE spells bytes this way)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


BYTE_CHARS: tuple[str, ...] = tuple(_gpt2_byte_chars())  # byte value → its stand-in character
BYTE_OF: dict[str, int] = {c: b for b, c in enumerate(BYTE_CHARS)}  # stand-in character → byte value


def readable_tokens(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own; a partial UTF-8 character shows as its bytes, ⟨E8 8B⟩."""
    out = []
    ids = [int(i) for i in ids]
    raw = tokenizer.convert_ids_to_tokens(ids)
    for i, r in zip(ids, raw):
        s = tokenizer.decode([i])
        if "\ufffd" in s and isinstance(r, str) and all(ch in BYTE_OF for ch in r):
            s = "⟨" + " ".join(f"{BYTE_OF[ch]:02X}" for ch in r) + "⟩"
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# the one label rule


def is_byte_label(piece: str) -> bool:
    return piece.startswith("⟨") and piece.endswith("⟩")


def visible(piece: Any) -> str:
    """A token piece made visible: space → ␣, newline → ⏎, tab → ⇥, other control characters → their
    Unicode 'control picture' (\\x00 → ␀, DEL → ␡), the empty piece → ∅. A byte label such as
    ⟨E5 BE⟩ is kept as it is: its spaces are ours, not the text's."""
    s = str(piece)
    if is_byte_label(s):
        return s
    out = []
    for ch in s:
        o = ord(ch)
        if ch == " ":
            out.append("␣")
        elif ch == "\n":
            out.append("⏎")
        elif ch == "\t":
            out.append("⇥")
        elif o < 0x20:
            out.append(chr(0x2400 + o))
        elif o == 0x7F:
            out.append("␡")
        else:
            out.append(ch)
    return "".join(out) or "∅"


def visible_tokens(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each id as a page shows it: decoded on its own, then made visible."""
    return [visible(s) for s in readable_tokens(tokenizer, ids)]


def position_label(tokens: Sequence[Any], i: int, offset: int = 0) -> str:
    """Position-prefixed visible token text for axes and tables ("3·苹"); ``offset`` numbers a
    window of a longer sequence by its absolute positions."""
    return f"{i + offset}·{visible(tokens[i])}"


def position_labels(tokens: Sequence[Any]) -> list[str]:
    return [position_label(tokens, i) for i in range(len(tokens))]


def special_mask(tokenizer: Any, ids: Sequence[int]) -> list[bool]:
    """Which ids are the tokenizer's special tokens (<|im_start|>, <bos> …)."""
    specials = set(getattr(tokenizer, "all_special_ids", []) or [])
    return [int(i) in specials for i in ids]


# ---------------------------------------------------------------------------------------------
# encoding


@dataclass(frozen=True)
class Encoded:
    text: str  # the exact string tokenised (after the chat template, if any)
    ids: list[int]
    truncated_from: int | None  # the length before the limit cut it, if it did
    notes: tuple[str, ...] = ()


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer: Any, prompt: str) -> str:
    """The prompt as one user message, with the generation prompt (the assistant header) added."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer: Any, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Encoded:
    """The prompt's ids, cut at ``max_tokens`` (with a note saying so)."""
    if prompt is None or not prompt.strip():
        raise EmptyPromptError("The prompt is empty.")
    notes: list[str] = []
    text = prompt
    if chat:
        if has_chat_template(tokenizer):
            text = chat_text(tokenizer, prompt)
        else:
            notes.append("This tokenizer has no chat template: the prompt is used as plain text.")
    ids = tokenizer(text, add_special_tokens=not chat)["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    if not ids:
        raise EmptyPromptError("The prompt produced no tokens.")
    truncated_from = None
    if len(ids) > max_tokens:
        truncated_from = len(ids)
        ids = ids[:max_tokens]
        notes.append(f"The prompt is {truncated_from} tokens long; only the first {max_tokens} are traced.")
    return Encoded(text, [int(i) for i in ids], truncated_from, tuple(notes))
