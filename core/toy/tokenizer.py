"""The toy's byte-level tokenizer: any text (Chinese and emoji included), no vocabulary file.

Bytes are spelled with GPT-2's stand-in characters (``core.engine.tokens.BYTE_CHARS``), so the
app's one label rule shows a partial UTF-8 character as ⟨E8⟩ for the toy and the real model alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.engine.tokens import BYTE_CHARS


class ByteTokenizer:
    """256 byte tokens + <bos>, <eos>, <pad>: every string can be encoded, nothing is unknown.

    A Chinese character is 3 UTF-8 bytes, so 3 tokens: the toy sees far longer sequences than a
    BPE model does for the same text (the tokens page shows why real models learn merges).
    """

    SPECIALS = ("<bos>", "<eos>", "<pad>")
    chat_template = None

    def __init__(self) -> None:
        self.bos_token_id, self.eos_token_id, self.pad_token_id = 256, 257, 258
        self.bos_token, self.eos_token, self.pad_token = self.SPECIALS
        self._chars = BYTE_CHARS
        self._char_to_id = {c: i for i, c in enumerate(self._chars)} | {s: 256 + i for i, s in enumerate(self.SPECIALS)}

    def __len__(self) -> int:
        return 256 + len(self.SPECIALS)

    @property
    def vocab_size(self) -> int:
        return len(self)

    @property
    def all_special_ids(self) -> list[int]:
        return [256, 257, 258]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        if isinstance(ids, (int, np.integer)):
            ids = [ids]
        out, buf = [], bytearray()
        for i in (int(x) for x in ids):
            if i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            if not skip_special_tokens and i < len(self):
                out.append(self.SPECIALS[i - 256])
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        if isinstance(ids, (int, np.integer)):
            return self.convert_ids_to_tokens([ids])[0]
        return [self._chars[i] if i < 256 else self.SPECIALS[i - 256] for i in (int(x) for x in ids)]

