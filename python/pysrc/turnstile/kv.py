"""Key-value GCRA limits from the limits YAML (Turnstile's native interface): ``spend``,
``refund``, ``check``, ``batch``, leases and the ``RateLimitState`` record. ``Limiter`` blocks (the
GIL released while it waits); ``AsyncLimiter`` has the same methods as coroutines. Outcomes are
dicts: ``allowed``, ``remaining``, ``retryAfter`` (seconds), ``resetMs``, ``limit``, ``bucket``."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _check, _native

LIMITS_FILE_VAR = "TURNSTILE_LIMITS_FILE"

Outcome = Dict[str, Any]


def _load(yaml: Optional[str], path: Optional[str]) -> str:
    if yaml is not None:
        if path is not None:
            raise TypeError("give yaml or path, not both")
        return _check.text("yaml", yaml)
    path = path if path is not None else os.environ.get(LIMITS_FILE_VAR)
    if path is None:
        raise ValueError(f"no limits: pass yaml=..., path=... or set {LIMITS_FILE_VAR}")
    with open(_check.text("path", path), encoding="utf-8") as f:
        return f.read()


def _spends(spends: Iterable[Tuple[str, str, int]]) -> List[Tuple[str, str, int]]:
    out = []
    for i, s in enumerate(spends):
        if not isinstance(s, tuple) or len(s) != 3:
            raise TypeError(f"spends[{i}] must be a (name, id, cost) tuple")
        out.append((_check.text(f"spends[{i}].name", s[0]), _check.text(f"spends[{i}].id", s[1]),
                    _check.integer(f"spends[{i}].cost", s[2], 1)))
    return out


class _Base:
    def __init__(self, yaml: Optional[str] = None, *, path: Optional[str] = None,
                 table: Optional[str] = None) -> None:
        table = _check.text("table", table) if table is not None else os.environ.get("TURNSTILE_BUCKET_TABLE")
        self._h = _native.KvLimiter(_load(yaml, path), table)

    def reload(self, yaml: Optional[str] = None, *, path: Optional[str] = None) -> None:
        """Replaces the limits; buckets keep their state. A bad file leaves the old limits."""
        self._h.reload(_load(yaml, path))

    def names(self) -> List[str]:
        return self._h.names()


def _args(name: Any, id: Any, cost: Any, minimum: int) -> Tuple[str, str, int]:
    return _check.text("name", name), _check.text("id", id), _check.integer("cost", cost, minimum)


class Limiter(_Base):
    """Blocking key-value limits: ``Limiter(yaml)``, ``Limiter(path=...)`` or ``TURNSTILE_LIMITS_FILE``."""

    def spend(self, name: str, id: str, cost: int = 1, *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_spend(self._h, *_args(name, id, cost, 1), now_ms)

    def refund(self, name: str, id: str, cost: int = 1, *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_refund(self._h, *_args(name, id, cost, 1), now_ms)

    def check(self, name: str, id: str, cost: int = 0, *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_check(self._h, *_args(name, id, cost, 0), now_ms)

    def batch(self, spends: Iterable[Tuple[str, str, int]], *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_batch(self._h, _spends(spends), now_ms)

    def acquire_lease(self, name: str, id: str, lease_id: str, estimate: int, ttl: float = 300.0,
                      *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_acquire_lease(self._h, _check.text("name", name), _check.text("id", id),
                                        _check.text("lease_id", lease_id), _check.integer("estimate", estimate, 1),
                                        _check.number("ttl", ttl), now_ms)

    def adjust_lease(self, name: str, id: str, lease_id: str, amount: int, *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_adjust_lease(self._h, _check.text("name", name), _check.text("id", id),
                                       _check.text("lease_id", lease_id), _check.integer("amount", amount, 0), now_ms)

    def commit_lease(self, name: str, id: str, lease_id: str) -> Outcome:
        return _native.kv_commit_lease(self._h, _check.text("name", name), _check.text("id", id),
                                       _check.text("lease_id", lease_id))

    def release_lease(self, name: str, id: str, lease_id: str, *, now_ms: Optional[int] = None) -> Outcome:
        return _native.kv_release_lease(self._h, _check.text("name", name), _check.text("id", id),
                                        _check.text("lease_id", lease_id), now_ms)

    def state(self, bucket: str, *, now_ms: Optional[int] = None) -> Dict[str, Any]:
        """The ``RateLimitState`` record of ``Name:id`` (or the stored ``{nameId}:{id}``)."""
        return _native.kv_state(self._h, _check.text("bucket", bucket), now_ms)

    def flush(self, *, now_ms: Optional[int] = None) -> int:
        """Records denials held in this process on their buckets (before the process exits)."""
        return _native.kv_flush(self._h, now_ms)


class AsyncLimiter(_Base):
    """``Limiter``'s twin for asyncio: every method is a coroutine (``await limiter.spend(...)``)."""

    async def spend(self, name: str, id: str, cost: int = 1, *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_spend_async(self._h, *_args(name, id, cost, 1), now_ms)

    async def refund(self, name: str, id: str, cost: int = 1, *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_refund_async(self._h, *_args(name, id, cost, 1), now_ms)

    async def check(self, name: str, id: str, cost: int = 0, *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_check_async(self._h, *_args(name, id, cost, 0), now_ms)

    async def batch(self, spends: Iterable[Tuple[str, str, int]], *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_batch_async(self._h, _spends(spends), now_ms)

    async def acquire_lease(self, name: str, id: str, lease_id: str, estimate: int, ttl: float = 300.0,
                            *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_acquire_lease_async(
            self._h, _check.text("name", name), _check.text("id", id), _check.text("lease_id", lease_id),
            _check.integer("estimate", estimate, 1), _check.number("ttl", ttl), now_ms)

    async def adjust_lease(self, name: str, id: str, lease_id: str, amount: int,
                           *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_adjust_lease_async(
            self._h, _check.text("name", name), _check.text("id", id), _check.text("lease_id", lease_id),
            _check.integer("amount", amount, 0), now_ms)

    async def commit_lease(self, name: str, id: str, lease_id: str) -> Outcome:
        return await _native.kv_commit_lease_async(self._h, _check.text("name", name), _check.text("id", id),
                                                   _check.text("lease_id", lease_id))

    async def release_lease(self, name: str, id: str, lease_id: str, *, now_ms: Optional[int] = None) -> Outcome:
        return await _native.kv_release_lease_async(self._h, _check.text("name", name), _check.text("id", id),
                                                    _check.text("lease_id", lease_id), now_ms)

    async def state(self, bucket: str, *, now_ms: Optional[int] = None) -> Dict[str, Any]:
        return await _native.kv_state_async(self._h, _check.text("bucket", bucket), now_ms)

    async def flush(self, *, now_ms: Optional[int] = None) -> int:
        return await _native.kv_flush_async(self._h, now_ms)
