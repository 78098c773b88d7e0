"""The asyncio side of the bridge: the native code creates a future on the running loop and
resolves it from a runtime thread through ``call_soon_threadsafe``."""

from __future__ import annotations

import asyncio
from typing import Any


def new_future() -> "asyncio.Future[Any]":
    return asyncio.get_running_loop().create_future()


def _set(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if fut.done():  # cancelled meanwhile
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def resolve(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    try:
        fut.get_loop().call_soon_threadsafe(_set, fut, ok, value)
    except RuntimeError:  # the loop is closed: nobody is waiting
        pass
