"""The receipt as a one-page PNG card (slides, homework), drawn with Pillow.

Plotly's own image export needs kaleido (and a browser it drives); kaleido is not installed here and the app
adds no package for one card, so the card is drawn with Pillow (already installed with Streamlit): the same
sentences as the Markdown card (``receipt.lines``, tokens shown in «»), in either language, and the lens curve
as a small line chart, in the palette's colours. Chinese needs a CJK font: Noto Sans CJK (the Makefile installs
``fonts-noto-cjk``), else DejaVu Sans, else Pillow's own font (Latin only).
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from core.cause import receipt
from core.common import i18n
from core.engine.types import say
from core.plot import palette

WIDTH = 1400
MARGIN = 48
FONTS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
BOLD = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")


def _font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    for path in (BOLD if bold else FONTS) + FONTS:
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size)


def _wrap(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.ImageFont, width: int) -> list[str]:
    """``text`` cut into lines no wider than ``width`` px: at spaces, or anywhere in a run without spaces (Chinese)."""
    out: list[str] = []
    line = ""
    for ch in text:
        trial = line + ch
        if draw.textlength(trial, font=font) <= width:
            line = trial
            continue
        cut = line.rfind(" ")
        if cut > len(line) // 2:  # break at the last space when it is not too far back
            out.append(line[:cut])
            line = line[cut + 1 :] + ch
        else:
            out.append(line)
            line = ch
    if line:
        out.append(line)
    return out


def _curve(draw: ImageDraw.ImageDraw, rc: receipt.Receipt, box: tuple[int, int, int, int], font: ImageFont.ImageFont,
           lang: str) -> None:
    f = rc.formed
    x0, y0, x1, y1 = box
    draw.rectangle(box, outline=palette.GRID)
    n = len(f.curve) - 1
    pts = [(x0 + (x1 - x0) * i / max(1, n), y1 - (y1 - y0) * float(p)) for i, p in enumerate(f.curve)]
    for at, dash in ((f.top5, 6), (f.top1, 12)):
        if at is not None:
            x = x0 + (x1 - x0) * at / max(1, n)
            for y in range(y0, y1, 2 * dash):
                draw.line([(x, y), (x, min(y1, y + dash))], fill=palette.INK_SOFT, width=2)
    draw.line(pts, fill=palette.colour("main"), width=4)
    for x, y in pts:
        draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=palette.colour("main"))
    draw.text((x0, y1 + 6), i18n.t("receipt.fig_x", lang), font=font, fill=palette.INK_SOFT)
    draw.text((x0 + 4, y0 + 4), "p = 1", font=font, fill=palette.INK_SOFT)


def png(rc: receipt.Receipt, lang: str) -> bytes:
    """The card as PNG bytes, in ``lang``."""
    said = receipt.lines(rc, lambda s: f"«{s}»")
    title, head, body, small = _font(40, True), _font(28, True), _font(22), _font(18)
    probe = ImageDraw.Draw(Image.new("RGB", (10, 10)))
    inner = WIDTH - 2 * MARGIN
    blocks: list[tuple[str, ImageFont.ImageFont, str]] = [
        (i18n.t("receipt.title", lang, tok=f"«{rc.token}»"), title, palette.INK),
        (i18n.t("receipt.context", lang, model=rc.model, pos=rc.pos, n=rc.n_tokens, prompt="«" + rc.tail + "»"),
         small, palette.INK_SOFT)]
    for sec in receipt.SECTIONS:
        if said[sec]:
            blocks.append((i18n.t(f"receipt.h_{sec}", lang), head, palette.INK))
            blocks += [("• " + say(p, lang), body, palette.INK) for p in said[sec]]
            if sec == "formed" and rc.formed is not None:
                blocks.append(("\0curve", body, ""))
    lines: list[tuple[str, ImageFont.ImageFont, str]] = []
    for text, font, ink in blocks:
        lines += [(x, font, ink) for x in ([text] if text == "\0curve" else _wrap(probe, text, font, inner))]
    curve_h = 220
    height = MARGIN * 2 + sum(curve_h + 40 if t == "\0curve" else int(f.size * 1.45) for t, f, _ in lines)
    img = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(img)
    y = MARGIN
    for text, font, ink in lines:
        if text == "\0curve":
            _curve(draw, rc, (MARGIN, y + 8, MARGIN + inner // 2, y + 8 + curve_h - 20), small, lang)
            y += curve_h + 40
            continue
        draw.text((MARGIN, y), text, font=font, fill=ink)
        y += int(font.size * 1.45)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()
