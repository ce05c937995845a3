"""The web layer, and the ONLY package that imports Streamlit: caches, session state, shared
widgets, the one token-chip renderer, presenter mode and the server launcher."""
