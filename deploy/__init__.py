"""Serving a lecture hall: several app processes behind nginx (``make serve``; see deploy/serve.py)."""
