"""Text → token ids, and token pieces → text a page can show. Written once, used by every page.

``encode``: the prompt (optionally in the chat template) to ids, with the trace limit. ``readable_tokens``:
each id decoded on its own, a partial UTF-8 piece shown as its bytes (``⟨E8 8B⟩``), never ``�``. THE label
rule, so a token reads the same everywhere: ``visible`` makes whitespace and control characters visible
(␣ ⏎ ⇥ ␀); ``token_labels`` / ``label`` add the character a byte token belongs to (``苹‹E8›``);
``byte_groups`` says which tokens share a character; ``position_label`` prefixes the position ("3·苹‹B9›").
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.engine.trace import MAX_TOKENS
from core.engine.types import EmptyPromptError, Tokenizer

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


# Per tokenizer, the pieces already decoded: id → readable piece. A piece is a function of its id alone (decoded on its
# own, with no neighbour), so it is made once per tokenizer and id, not once per trace. At most PIECES_MAX ids a
# tokenizer (a few MB), weakly keyed: a tokenizer the app lets go takes its pieces with it.
_PIECES: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()
PIECES_MAX = 1 << 16


def _pieces_of(tokenizer: Tokenizer) -> dict[int, str]:
    try:
        return _PIECES.setdefault(tokenizer, {})
    except TypeError:  # neither hashable nor weakly referable: decoded every time
        return {}


def readable_tokens(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own; a partial UTF-8 character shows as its bytes, ⟨E8 8B⟩."""
    ids = [int(i) for i in ids]
    known = _pieces_of(tokenizer)
    new = [i for i in dict.fromkeys(ids) if i not in known]
    made: dict[int, str] = {}
    for i, r in zip(new, tokenizer.convert_ids_to_tokens(new) if new else []):
        s = tokenizer.decode([i])
        if "\ufffd" in s and isinstance(r, str) and all(ch in BYTE_OF for ch in r):
            s = "⟨" + " ".join(f"{BYTE_OF[ch]:02X}" for ch in r) + "⟩"
        made[i] = s
    if made and len(known) + len(made) <= PIECES_MAX:
        known.update(made)
    return [made[i] if i in made else known[i] for i in ids]


# ---------------------------------------------------------------------------------------------
# the one label rule


# A token that is only part of a UTF-8 character is kept in the trace as its bytes, ⟨E8 8B⟩, and
# shown as ‹E8 8B›: the mathematical angle brackets read as parentheses in many fonts ("(E8)"), the
# single guillemets read as brackets in every font the app uses. Both forms are recognised.
_BYTE_LABEL = re.compile(r"[⟨‹][0-9A-F]{2}(?: [0-9A-F]{2})*[⟩›]")
SHOW_OPEN, SHOW_CLOSE = "‹", "›"
_CONTEXT = 3  # a UTF-8 character is at most 4 bytes, so at most 3 neighbours on each side share it


def is_byte_label(piece: str) -> bool:
    return bool(_BYTE_LABEL.fullmatch(str(piece)))


def _visible_text(s: str) -> str:
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
    return "".join(out)


def visible(piece: Any) -> str:
    """A token piece made visible: space → ␣, newline → ⏎, tab → ⇥, other control characters → their
    Unicode 'control picture' (\\x00 → ␀, DEL → ␡), the empty piece → ∅. A byte label such as
    ⟨E5 BE⟩ is kept whole wherever it stands (its spaces are ours, not the text's) and shown as
    ‹E5 BE›, so a label that already went through the rule comes out unchanged."""
    s = str(piece)
    out, at = [], 0
    for m in _BYTE_LABEL.finditer(s):
        out.append(_visible_text(s[at : m.start()]))
        out.append(SHOW_OPEN + m.group(0)[1:-1] + SHOW_CLOSE)
        at = m.end()
    out.append(_visible_text(s[at:]))
    return "".join(out) or "∅"


def _bytes_of(piece: Any) -> bytes:
    """The UTF-8 bytes a piece stands for: a byte label's own bytes, any other piece's text."""
    s = str(piece)
    return bytes.fromhex(s[1:-1]) if is_byte_label(s) else s.encode("utf-8")


def _utf8_chars(data: bytes) -> list[tuple[int, int, str | None]]:
    """(start, end, character) for every character of ``data``; a byte that starts no valid
    character is (p, p + 1, None)."""
    out, p = [], 0
    while p < len(data):
        b = data[p]
        n = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4 if b >> 3 == 0b11110 else 0
        ch = None
        if n and p + n <= len(data):
            try:
                ch = data[p : p + n].decode("utf-8")
            except UnicodeDecodeError:
                ch = None
        if ch is None:
            out.append((p, p + 1, None))
            p += 1
        else:
            out.append((p, p + n, ch))
            p += n
    return out


def _shared_chars(pieces: Sequence[Any]) -> tuple[list[str | None], list[int]]:
    """For each piece: the characters its bytes belong to when it is a byte label (decoded with its
    neighbours; None when they do not make a whole character), and the index of the first piece
    of the run of pieces that share characters with it (a piece alone is its own run)."""
    spans, data, at = [], bytearray(), 0
    for piece in pieces:
        b = _bytes_of(piece)
        spans.append((at, at + len(b)))
        data += b
        at += len(b)
    chars = _utf8_chars(bytes(data))
    texts: list[str | None] = [None] * len(spans)
    run = list(range(len(spans)))
    c = 0
    for i, (s, e) in enumerate(spans):
        while c < len(chars) and chars[c][1] <= s:
            c += 1
        mine, k = [], c
        while k < len(chars) and chars[k][0] < e:
            mine.append(chars[k])
            k += 1
        if mine and mine[0][0] < s and mine[0][2] is not None and i > 0:
            run[i] = run[i - 1]  # the first character began in the piece before: one run
        if is_byte_label(pieces[i]) and mine and all(ch is not None for _, _, ch in mine):
            texts[i] = "".join(ch for _, _, ch in mine)  # type: ignore[misc]
    return texts, run


def _with_text(piece: Any, text: str | None) -> str:
    return visible(piece) if text is None else visible(text) + visible(piece)


def token_labels(pieces: Sequence[Any]) -> list[str]:
    """THE label of every token of a sequence: ``visible``, and in front of a byte token the
    character(s) its bytes belong to ("苹‹E8›", "苹‹B9›"); a byte token whose character is
    not whole in the sequence keeps its bytes only ("‹E6 88›")."""
    if isinstance(pieces, TokenWindow):
        return [label(pieces, i) for i in range(len(pieces))]
    texts, _ = _shared_chars(list(pieces))
    return [_with_text(p, t) for p, t in zip(pieces, texts)]


class TokenWindow(Sequence):
    """Positions lo … hi − 1 of a longer token sequence that still knows its neighbours: a byte
    token at the window's edge keeps the character it shares with a token outside the window, so
    a windowed figure labels it as the whole-sequence figure does. Use ``window(tokens, lo, hi)``
    wherever a figure gets a slice of the prompt's tokens."""

    def __init__(self, full: Sequence[Any], lo: int, hi: int) -> None:
        self.full, self.lo, self.hi = full, max(0, int(lo)), min(len(full), int(hi))

    def __len__(self) -> int:
        return max(0, self.hi - self.lo)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step == 1:
                return TokenWindow(self.full, self.lo + a, self.lo + b)
            return [self[j] for j in range(a, b, step)]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.full[self.lo + i]


def window(tokens: Sequence[Any], lo: int, hi: int) -> TokenWindow:
    return TokenWindow(tokens, lo, hi)


def label(pieces: Sequence[Any], i: int) -> str:
    """``token_labels(pieces)[i]``, computed from position i's neighbours only (so an axis of
    thousands of ticks costs no more than its ticks)."""
    if isinstance(pieces, TokenWindow):
        return label(pieces.full, pieces.lo + i)
    lo = max(0, i - _CONTEXT)
    window = [pieces[j] for j in range(lo, min(len(pieces), i + _CONTEXT + 1))]
    texts, _ = _shared_chars(window)
    return _with_text(pieces[i], texts[i - lo])


def byte_groups(pieces: Sequence[Any]) -> list[tuple[int, int, str]]:
    """Runs of two or more neighbouring tokens that share a character — (first, end, the run's
    decoded text) — so a renderer can frame the bytes of one character together."""
    pieces = list(pieces)
    _, run = _shared_chars(pieces)
    out, i = [], 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and run[j] == i:
            j += 1
        if j - i > 1:
            text = b"".join(_bytes_of(p) for p in pieces[i:j]).decode("utf-8", errors="replace")
            out.append((i, j, text))
        i = j
    return out


def decoded_text(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of ``ids`` as one string, as far as it is whole: when the last tokens are only the
    first bytes of a UTF-8 character (a step stopped inside 苹 = E8 8B B9), those bytes are shown as
    still waiting, "‹E8 8B›", never as "�". Anything else decodes as the tokenizer decodes it."""
    ids = [int(i) for i in ids]
    text = tokenizer.decode(ids)
    if not text.endswith("\ufffd"):
        return text
    for k in range(1, min(_CONTEXT, len(ids)) + 1):
        head = tokenizer.decode(ids[:-k]) if k < len(ids) else ""
        if head.endswith("\ufffd"):
            continue
        tail = readable_tokens(tokenizer, ids[-k:])
        if not all(is_byte_label(p) for p in tail):
            break
        data = b"".join(_bytes_of(p) for p in tail)
        return head + SHOW_OPEN + " ".join(f"{b:02X}" for b in data) + SHOW_CLOSE
    return text


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese (CJK unified) character."""
    return bool(_CJK.search(text))


def tokens_per_char(tokenizer: Tokenizer, text: str) -> tuple[int, int]:
    """(tokens, characters) of ``text`` as plain text, no chat template: what one character costs."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return len(ids), len(text)


def visible_tokens(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each id as a page shows it when it stands alone (a list of candidates, not a sequence):
    decoded on its own, then made visible."""
    return [visible(s) for s in readable_tokens(tokenizer, ids)]


def sequence_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """The ids of one sequence (a prompt, a continuation) as a page shows them: ``token_labels``."""
    return token_labels(readable_tokens(tokenizer, ids))


def position_label(tokens: Sequence[Any], i: int, offset: int = 0) -> str:
    """Position-prefixed label for axes and tables ("3·苹‹B9›"); ``offset`` numbers a window of a
    longer sequence by its absolute positions."""
    return f"{i + offset}·{label(tokens, i)}"


def position_labels(tokens: Sequence[Any], offset: int = 0) -> list[str]:
    return [f"{i + offset}·{s}" for i, s in enumerate(token_labels(tokens))]


def rank_labels(pieces: Sequence[Any]) -> list[str]:
    """Candidates for the next token, each alone (no neighbours), numbered by rank: "#1 ␣Paris"."""
    return [f"#{i + 1} {visible(p)}" for i, p in enumerate(pieces)]


def special_mask(tokenizer: Tokenizer, ids: Sequence[int]) -> list[bool]:
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
    cut_by: str | None = None  # which limit cut it: "app" (the trace limit) or "model" (its own positions)
    kept_tail: bool = False  # a chat-templated prompt was cut inside the user's text, keeping the template's end


CUT_APP, CUT_MODEL = "app", "model"


def has_chat_template(tokenizer: Tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer: Tokenizer, prompt: str) -> str:
    """The prompt as one user message, with the generation prompt (the assistant header) added."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


NOTE_NO_TEMPLATE = "This tokenizer has no chat template: the prompt is used as plain text."  # a page shows i18n "toy.note_no_template"


def prompt_limit(max_tokens: int = MAX_TOKENS, max_positions: int | None = None) -> tuple[int, str]:
    """The most tokens a prompt may have, and whose limit that is: the app's ``max_tokens``, or the
    model's own positions (config ``max_position_embeddings`` / ``n_positions``) when they are fewer.
    A model that states no positions (0 or None) has no limit of its own."""
    if max_positions and 0 < int(max_positions) < int(max_tokens):
        return int(max_positions), CUT_MODEL
    return int(max_tokens), CUT_APP


def cut_notice(truncated_from: int, kept: int, cut_by: str | None, kept_tail: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The sentences (i18n key, arguments) that say a prompt was cut, and by whose limit:
    ``warn.truncated`` (the app's trace limit) or ``warn.truncated_model`` (the model's own positions),
    then ``warn.truncated_tail`` when the chat template's end was kept after the user's cut text."""
    args: dict[str, Any] = {"n": f"{int(truncated_from):,}", "k": f"{int(kept):,}"}
    out = [("warn.truncated_model" if cut_by == CUT_MODEL else "warn.truncated", args)]
    if kept_tail:
        out.append(("warn.truncated_tail", {}))
    return out


def _ids(tokenizer: Tokenizer, text: str, special: bool, split: bool = False) -> list[int]:
    """``text``'s ids; ``split``: a special token's spelling in it is read as text (``<|im_start|>`` → ``<``,
    ``|``, ``im`` …), never as the control token."""
    kw = {"split_special_tokens": True} if split else {}
    ids = tokenizer(text, add_special_tokens=special, **kw)["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


_SLOT = "\ue000xray-user-text\ue000"  # a private-use marker no prompt contains: where the user's text goes


def _template_parts(tokenizer: Tokenizer) -> tuple[str, str] | None:
    """The chat template's text before and after the user's message (system turn and user header; the
    user's end and the assistant header), or None when the template does not place the message once."""
    try:
        parts = chat_text(tokenizer, _SLOT).split(_SLOT)
    except Exception:  # a template that refuses the marker: cut the plain way
        return None
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _cut_keeping_tail(tokenizer: Tokenizer, prompt: str, limit: int) -> tuple[str, list[int]] | None:
    """A chat-templated prompt cut inside the user's text, so that the template's end (``<|im_end|>`` and
    the assistant header: what makes the next token an assistant's answer) is kept; None when the
    template's own tokens leave no room for any of the user's text."""
    parts = _template_parts(tokenizer)
    if parts is None:
        return None
    head, tail = (_ids(tokenizer, p, False) for p in parts)
    room = limit - len(head) - len(tail)
    if room < 1:
        return None
    user = _ids(tokenizer, prompt, False, split=True)[:room]
    return parts[0] + tokenizer.decode(user) + parts[1], head + user + tail


def typed_specials(tokenizer: Tokenizer, prompt: str) -> bool:
    """Whether ``prompt`` spells a special token (``<|im_start|>``, ``<|im_end|>`` …) the tokenizer would read
    as a control token."""
    return _ids(tokenizer, prompt, False) != _ids(tokenizer, prompt, False, split=True)


def _chat_ids(tokenizer: Tokenizer, text: str, prompt: str) -> list[int]:
    """The templated ``text``'s ids, the user's message read as text: a special token typed in it
    (``<|im_start|>system …<|im_end|>``) is split into ordinary pieces, so that only the template writes
    control tokens and no one opens a turn of their own. The ids of a message without one are the plain
    tokenisation's."""
    parts = _template_parts(tokenizer) if typed_specials(tokenizer, prompt) else None
    if parts is None:
        return _ids(tokenizer, text, False)
    return _ids(tokenizer, parts[0], False) + _ids(tokenizer, prompt, False, split=True) + _ids(tokenizer, parts[1], False)


def encode(tokenizer: Tokenizer, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS,
           max_positions: int | None = None) -> Encoded:
    """The prompt's ids, cut at ``max_tokens`` or at the model's own ``max_positions`` when fewer (with a
    note saying so, and ``cut_by`` saying whose limit it was). With the chat template a long prompt is cut
    inside the user's text: the template's end (the assistant header) stays, so the next token is still
    the assistant's first. Inside the template a special token the user typed is read as text
    (``_chat_ids``); with the template off the text is read as it is (a typed ``<|endoftext|>`` is the token)."""
    if prompt is None or not prompt.strip():
        raise EmptyPromptError("empty")
    notes: list[str] = []
    text = prompt
    templated = chat and has_chat_template(tokenizer)
    if templated:
        text = chat_text(tokenizer, prompt)
    elif chat:
        notes.append(NOTE_NO_TEMPLATE)
    ids = _chat_ids(tokenizer, text, prompt) if templated else _ids(tokenizer, text, not chat)
    if not ids:
        raise EmptyPromptError("no_tokens")
    limit, by = prompt_limit(max_tokens, max_positions)
    if len(ids) <= limit:
        return Encoded(text, ids, None, tuple(notes))
    truncated_from, kept_tail = len(ids), False
    cut = _cut_keeping_tail(tokenizer, prompt, limit) if templated else None
    if cut is not None:
        text, ids = cut
        kept_tail = True
    else:
        ids = ids[:limit]
    whose = f"the model reads at most {limit} positions" if by == CUT_MODEL else f"the trace limit is {limit} tokens"
    notes.append(f"The prompt is {truncated_from} tokens long ({whose}); only the first {len(ids)} are traced"
                 + ("; the chat template's end is kept." if kept_tail else "."))
    return Encoded(text, ids, truncated_from, tuple(notes), by, kept_tail)
