"""Start the app: ``python -m core.web.server [streamlit options]`` (what ``make run`` does).

Same as ``streamlit run app.py``, with one fix: Streamlit still treats a folder named ``pages/``
next to the entry script as its old automatic multipage folder until ``st.navigation`` runs once.
On a fresh server, the very first visitor arriving on a deep link (``/heads?layer=3`` — the links
a teacher shares) would get that page's script alone, without the router and its sidebar. Our
``pages/`` are ``st.navigation`` pages, so we say so before the server starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web import cli

from core.engine import offer


def main(argv: list[str] | None = None) -> int:
    try:  # a malformed XRAY_MODELS / XRAY_ALLOW_LOCAL stops the launch with the reason, before serving anyone
        offer.from_env()
    except offer.OfferError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    PagesManager.uses_pages_directory = False
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    sys.argv = ["streamlit", "run", app, *(sys.argv[1:] if argv is None else argv)]
    try:
        cli.main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
