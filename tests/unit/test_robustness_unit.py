"""Bad input never gives a traceback: odd prompts and broken model folders each give a clear
message in the page, the previous model stays in use, and the trace cache stays bounded.

Pages are driven through AppTest (the sidebar prompt is the text area with key "prompt"); forward
passes are counted by wrapping ``core.backends.trace_ids``.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# memory: the trace cache is bounded


def test_trace_cache_stays_bounded_by_bytes_after_50_prompts(tiny_dirs, forward_count, monkeypatch):
    """The traces of every session share one cache bounded by bytes (XRAY_CACHE_GB): 50 prompts never
    hold more than the budget, the newest stay, the oldest are traced again when asked."""
    from core.web import cache

    spec = str(tiny_dirs["llama"])
    one = cache.backends.trace(cache.get_model(spec), "prompt number 0: ").nbytes
    forward_count["n"] = 0
    monkeypatch.setenv("XRAY_CACHE_GB", str(10.5 * one / 1e9))  # room for about ten of these traces
    cache.store.clear()
    try:
        for i in range(50):
            tr = cache.get_trace(spec, f"prompt number {i}: {'x' * (i % 3)}", False)
            assert tr.prompt.startswith(f"prompt number {i}:")
        assert forward_count["n"] == 50  # 50 different prompts, 50 forward passes
        st = cache.store().stats()
        assert st["bytes"] <= st["max_bytes"] and 5 <= st["entries"] <= 11, st
        cache.get_trace(spec, "prompt number 49: " + "x" * (49 % 3), False)  # the newest is still cached
        assert forward_count["n"] == 50
        cache.get_trace(spec, "prompt number 0: ", False)  # the oldest was evicted: traced again
        assert forward_count["n"] == 51
    finally:
        cache.store.clear()
