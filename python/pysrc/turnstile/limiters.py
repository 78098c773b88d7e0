"""rate-limiter-py's interface (``rate_limit``, ``fungible_limiter``, ``non_fungible_limiter``) on
Turnstile's core: the same names, arguments, defaults, variables and tables, exact under
concurrency. Each also works from asyncio: ``async with``, ``await ..._async()``, and
``rate_limit`` on an ``async def``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Optional, TypeVar

from . import _check, _native
from .exceptions import CapacityExhaustedException

F = TypeVar("F", bound=Callable[..., Any])

TOKEN_TTL_SECS = 28800


def _exhausted(resource: str, account: str, d: "_native.TokenDecision") -> CapacityExhaustedException:
    if d.source == "blocked":
        msg = f"Account {account} has not been allocated any capacity for {resource}"
    else:
        msg = f"Resource capacity exhausted for {resource}:{account}"
    return CapacityExhaustedException(msg, d.retry_after)


class _Fungible:
    """What the fungible limiters share: the resource, its default limit and the tables."""

    def __init__(self, resource_name: str, default_limit: int, default_window: int,
                 token_table: Optional[str], limit_table: Optional[str]) -> None:
        self.resource_name = _check.text("resource_name", resource_name)
        self.default_limit = _check.integer("default_limit", default_limit)
        self.default_window = _check.integer("default_window", default_window, 1)
        self.token_table = _check.table("token_table", token_table, "FUNGIBLE_TABLE", "fungible-tokens")
        self.limit_table = _check.table("limit_table", limit_table, "LIMIT_TABLE", "limits")

    def _take(self, account_id: str) -> "_native.TokenDecision":
        d = _native.get_token(self.resource_name, account_id, self.default_limit, self.default_window,
                              self.token_table, self.limit_table)
        if not d.granted:
            raise _exhausted(self.resource_name, account_id, d)
        return d

    async def _take_async(self, account_id: str) -> "_native.TokenDecision":
        d = await _native.get_token_async(self.resource_name, account_id, self.default_limit,
                                          self.default_window, self.token_table, self.limit_table)
        if not d.granted:
            raise _exhausted(self.resource_name, account_id, d)
        return d


class FungibleTokenContextManager(_Fungible):
    """``with fungible_limiter(resource, account_id, limit, window):`` runs the block only when a
    token was taken; ``get_token()`` takes one directly. Raises ``CapacityExhaustedException``
    (with ``retry_after``) when none is available."""

    def __init__(self, resource_name: str, account_id: str, default_limit: int, default_window: int,
                 token_table: Optional[str] = None, limit_table: Optional[str] = None) -> None:
        super().__init__(resource_name, default_limit, default_window, token_table, limit_table)
        self.account_id = _check.text("account_id", account_id)

    def __enter__(self) -> None:
        self.get_token()

    def __exit__(self, *args: Any) -> None:
        pass

    async def __aenter__(self) -> None:
        await self.get_token_async()

    async def __aexit__(self, *args: Any) -> None:
        pass

    def get_token(self) -> "_native.TokenDecision":
        """Claims a token; answers the decision (remaining tokens, reset time)."""
        return self._take(self.account_id)

    async def get_token_async(self) -> "_native.TokenDecision":
        return await self._take_async(self.account_id)


class FungibleTokenLimiterDecorator(_Fungible):
    """``@rate_limit(resource, limit, window, account_id_pos=..., account_id_key='account_id')``: the
    account id is the positional argument at ``account_id_pos`` when given, else the keyword
    argument ``account_id_key``. Works on ``def`` and ``async def`` functions."""

    def __init__(self, resource_name: str, default_limit: int, default_window: int,
                 token_table: Optional[str] = None, limit_table: Optional[str] = None,
                 account_id_pos: Optional[int] = None, account_id_key: str = "account_id") -> None:
        super().__init__(resource_name, default_limit, default_window, token_table, limit_table)
        if account_id_pos is not None:
            _check.integer("account_id_pos", account_id_pos, 0)
        self.account_id_pos = account_id_pos
        self.account_id_key = _check.text("account_id_key", account_id_key)

    def _account(self, args: tuple, kwargs: Dict[str, Any]) -> str:
        try:
            if self.account_id_pos is None:
                value = kwargs[self.account_id_key]
            else:
                value = args[self.account_id_pos]
        except (KeyError, IndexError):
            where = (f"keyword argument {self.account_id_key!r}" if self.account_id_pos is None
                     else f"positional argument {self.account_id_pos}")
            raise TypeError(f"rate_limit({self.resource_name!r}): the call has no {where} (the account id)") from None
        return _check.text("account_id", value)

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                await self._take_async(self._account(args, kwargs))
                return await func(*args, **kwargs)
            return limited_async  # type: ignore[return-value]

        @functools.wraps(func)
        def limited(*args: Any, **kwargs: Any) -> Any:
            self._take(self._account(args, kwargs))
            return func(*args, **kwargs)
        return limited  # type: ignore[return-value]


class TokenReservation:
    """A held unit of non-fungible capacity. ``create_token(resource_id)`` binds it to a resource
    for ``expiration`` seconds (8 hours); ``delete()`` gives it back."""

    def __init__(self, limiter: "NonFungibleTokenLimiterContextManager", info: Dict[str, Any]) -> None:
        self._limiter = limiter
        self.id: str = info["id"]
        self.resource_name: str = info["resource"]
        self.account_id: str = info["account"]
        self.coordinate: str = info["coordinate"]
        self.expires_at: Optional[int] = info.get("expires_at")
        self.is_deleted = False
        self.is_token_created = False

    def _can_bind(self, resource_id: Any, expiration: Any) -> None:
        _check.text("resource_id", resource_id)
        _check.integer("expiration", expiration, 1)
        if self.is_token_created:
            raise ValueError(f"Token already created for {resource_id} from this reservation [{self.id}]")
        if self.is_deleted:
            raise ValueError(f"This reservation [{self.id}] has been deleted")

    def _args(self) -> tuple:
        return (self.resource_name, self.account_id, self.id)

    def _tables(self) -> Dict[str, Optional[str]]:
        lim = self._limiter
        return {"token_table": lim.token_table, "limit_table": lim.limit_table, "index": lim.index}

    def create_token(self, resource_id: str, expiration: int = TOKEN_TTL_SECS) -> Dict[str, Any]:
        self._can_bind(resource_id, expiration)
        token = _native.create_token(*self._args(), resource_id, expiration, **self._tables())
        self.is_token_created = True
        return token

    async def create_token_async(self, resource_id: str, expiration: int = TOKEN_TTL_SECS) -> Dict[str, Any]:
        self._can_bind(resource_id, expiration)
        token = await _native.create_token_async(*self._args(), resource_id, expiration, **self._tables())
        self.is_token_created = True
        return token

    def delete(self) -> None:
        _native.delete_reservation(*self._args(), **self._tables())
        self.is_deleted = True

    async def delete_async(self) -> None:
        await _native.delete_reservation_async(*self._args(), **self._tables())
        self.is_deleted = True


class NonFungibleTokenLimiterContextManager:
    """``with non_fungible_limiter(resource, account_id, limit) as reservation:`` holds one unit of
    capacity for the block; if the block raises, the reservation is deleted. ``get_reservation()``
    holds one directly. Raises ``CapacityExhaustedException`` when all are held."""

    def __init__(self, resource_name: str, account_id: str, default_limit: int,
                 token_table: Optional[str] = None, limit_table: Optional[str] = None,
                 index: Optional[str] = None) -> None:
        self.resource_name = _check.text("resource_name", resource_name)
        self.account_id = _check.text("account_id", account_id)
        self.default_limit = _check.integer("default_limit", default_limit)
        self.token_table = _check.table("token_table", token_table, "NON_FUNGIBLE_TABLE", "non-fungible-tokens")
        self.limit_table = _check.table("limit_table", limit_table, "LIMIT_TABLE", "limits")
        self.index = _check.table("index", index, "NON_FUNGIBLE_RES_INDEX", "resource-index")
        self.reservation: Optional[TokenReservation] = None

    def _call_args(self) -> tuple:
        return (self.resource_name, self.account_id, self.default_limit, self.token_table,
                self.limit_table, self.index)

    def get_reservation(self) -> TokenReservation:
        return TokenReservation(self, _native.get_reservation(*self._call_args()))

    async def get_reservation_async(self) -> TokenReservation:
        return TokenReservation(self, await _native.get_reservation_async(*self._call_args()))

    def __enter__(self) -> TokenReservation:
        self.reservation = self.get_reservation()
        return self.reservation

    def __exit__(self, exc_type: Any, *args: Any) -> None:
        if exc_type is not None and self.reservation is not None and not self.reservation.is_deleted:
            self.reservation.delete()

    async def __aenter__(self) -> TokenReservation:
        self.reservation = await self.get_reservation_async()
        return self.reservation

    async def __aexit__(self, exc_type: Any, *args: Any) -> None:
        if exc_type is not None and self.reservation is not None and not self.reservation.is_deleted:
            await self.reservation.delete_async()


non_fungible_limiter = NonFungibleTokenLimiterContextManager
fungible_limiter = FungibleTokenContextManager
rate_limit = FungibleTokenLimiterDecorator
