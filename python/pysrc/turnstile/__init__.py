"""Turnstile from Python: rate-limiter-py's interface (``rate_limit``, ``fungible_limiter``,
``non_fungible_limiter``, ``turnstile.event_processors``) and key-value GCRA limits
(``turnstile.kv``), served by Turnstile's Rust core. See docs/python.md."""

from ._native import TokenDecision, __version__, reset_usage, usage
from . import exceptions as _exceptions
from .exceptions import *  # noqa: F401,F403 (the names of exceptions.__all__)
from .limiters import (
    FungibleTokenContextManager,
    FungibleTokenLimiterDecorator,
    NonFungibleTokenLimiterContextManager,
    TokenReservation,
    fungible_limiter,
    non_fungible_limiter,
    rate_limit,
)

__all__ = [
    "__version__",
    "usage",
    "reset_usage",
    "rate_limit",
    "fungible_limiter",
    "non_fungible_limiter",
    "FungibleTokenContextManager",
    "FungibleTokenLimiterDecorator",
    "NonFungibleTokenLimiterContextManager",
    "TokenReservation",
    "TokenDecision",
    *_exceptions.__all__,
]
