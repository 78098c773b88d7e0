"""The exceptions every call may raise (rate-limiter-py's four, plus Turnstile's refinements).

A wrong argument type is a ``TypeError`` and a wrong value a ``ValueError``, both naming the argument
and raised before any DynamoDB call. Everything else is a ``RateLimiterException``.
"""

from __future__ import annotations

from typing import Optional


class RateLimiterException(Exception):
    """An unrecoverable failure: a DynamoDB error, a missing table, a malformed row."""


class CapacityExhaustedException(RateLimiterException):
    """No token or reservation is available. ``retry_after`` is how many seconds until one may be
    (``None`` when no wait helps: the account is blocked, or non-fungible capacity is held until
    someone releases it)."""

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ThrottlingException(RateLimiterException):
    """DynamoDB throttled the call past the SDK's retries, or a bucket stayed contended."""


class ReservationNotFoundException(RateLimiterException):
    """The reservation expired or was deleted: its capacity may already be someone else's."""


class ResourceEndedException(ReservationNotFoundException):
    """The resource ended (its token was removed) before the bind: the reservation is released."""


class AlreadyBoundException(RateLimiterException, ValueError):
    """The reservation is already bound to another resource."""


class LeaseNotFoundException(RateLimiterException, LookupError):
    """No such lease (committed, released, or never acquired)."""


class LeaseExpiredException(RateLimiterException):
    """The lease's deadline had passed: its amount was returned to the bucket."""


__all__ = [
    "RateLimiterException",
    "CapacityExhaustedException",
    "ThrottlingException",
    "ReservationNotFoundException",
    "ResourceEndedException",
    "AlreadyBoundException",
    "LeaseNotFoundException",
    "LeaseExpiredException",
]
