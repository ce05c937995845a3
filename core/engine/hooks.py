"""The ONE way this app attaches hooks to a shared model: scoped by a ``with`` block, removed in
``finally``, and deaf to every thread but the one that opened the block.

The model object is shared by every browser session (each runs in its own thread). A hook left
registered, or one that fired for another session's forward pass, would leak one user's request
into another's. ``scoped_hooks`` makes both impossible by construction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch import nn


def first_of(out: Any) -> Any:
    """A module's output tensor: the first item of the tuple that blocks and attention modules return."""
    return out[0] if isinstance(out, (tuple, list)) else out


def hidden_of(args: tuple, kwargs: dict) -> Any:
    """A block's (or attention module's) input stream, passed by position or as ``hidden_states``."""
    return args[0] if args else kwargs["hidden_states"]


# (module, kind, fn): kind "forward" → fn(module, args, output); "forward_kwargs" → fn(module, args, kwargs, output)
# (one hook where a caller wants both what a module was called with and what it returned); "pre" → fn(module, args)
# and may return new args; "pre_kwargs" → fn(module, args, kwargs) and may return (args, kwargs).
HookSpec = tuple[nn.Module, str, Callable[..., Any]]


@contextlib.contextmanager
def scoped_hooks(specs: Iterable[HookSpec]) -> Iterator[None]:
    """Register every hook for this thread only; always remove them all on exit."""
    tid = threading.get_ident()
    handles = []

    def only_mine(fn: Callable[..., Any]) -> Callable[..., Any]:
        def hook(*a: Any) -> Any:
            return fn(*a) if threading.get_ident() == tid else None

        return hook

    try:
        for module, kind, fn in specs:
            if kind == "forward":
                handles.append(module.register_forward_hook(only_mine(fn)))
            elif kind == "forward_kwargs":
                handles.append(module.register_forward_hook(only_mine(fn), with_kwargs=True))
            elif kind == "pre":
                handles.append(module.register_forward_pre_hook(only_mine(fn)))
            elif kind == "pre_kwargs":
                handles.append(module.register_forward_pre_hook(only_mine(fn), with_kwargs=True))
            else:
                raise ValueError(f"unknown hook kind {kind!r}")
        yield
    finally:
        for h in handles:
            h.remove()
