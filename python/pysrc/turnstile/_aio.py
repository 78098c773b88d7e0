"""The asyncio side of the bridge: each event loop gets one ``Completions`` queue, watched with
``loop.add_reader``. Runtime threads queue answers there and wake the loop with one byte; the loop's
own thread resolves the futures (no runtime thread ever takes the GIL)."""

from __future__ import annotations

import asyncio
import weakref

from ._native import Completions

_by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Completions]" = weakref.WeakKeyDictionary()


def completions(loop: asyncio.AbstractEventLoop) -> Completions:
    """The loop's queue, made and watched on its first call (dropped with the loop)."""
    c = _by_loop.get(loop)
    if c is None:
        c = Completions()
        loop.add_reader(c.fileno(), c.drain)
        _by_loop[loop] = c
    return c
