"""Helpers shared by the tiers of test_echo's tests (tests/*/test_echo*.py)."""

from __future__ import annotations

import re

_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)*?\1", re.S)
_AUTOLINK = re.compile(r"(?i)https?://\S*evil|www\.evil|[-.\w+]+@evil")


def live_links(body: str) -> list[str]:
    """What in the Markdown ``body`` would render as a link, image, autolink or HTML tag pointing at
    evil.example (code spans render nothing, so they are left out). remark-gfm finds autolinks in the
    text left after backslash escapes are resolved, so that is where they are looked for."""
    text = _CODE_SPAN.sub("", body)
    if text.lstrip().startswith("<"):  # an HTML block (a page's own markup: chips, a figure's table): no Markdown in it
        return re.findall(r"(?i)<\s*(?:img|a)\b[^>]*evil|<b>x</b>", text)
    found = re.findall(r"(?<!\\)\]\s*\(\s*<?[^)]*evil", text)  # [a](…) and ![x](…)
    found += re.findall(r"(?i)<\s*(?:img|a)\b[^>]*evil|<b>x</b>", text)  # the payload's tags, raw (entities are text)
    plain = re.sub(r"\\(.)", r"\1", text)  # what the renderer reads as text
    found += _AUTOLINK.findall(plain)
    return found
