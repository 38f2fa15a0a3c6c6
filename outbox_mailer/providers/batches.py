"""Batch requests (many emails per request): what a provider with a batch endpoint adds. Pure: no I/O.

A provider with a batch endpoint (:mod:`.resend`: ``POST /emails/batch``, up to 100;
:mod:`.postmark`: ``POST /email/batch``, up to 500) satisfies :class:`BatchProvider`:
``batch_limit``, ``batchable`` (which messages may go in a batch at all),
``build_batch`` (one request for the members, under one idempotency key) and
``interpret_batch`` (exactly one :data:`~outbox_mailer.delivery.BatchOutcome` per
member, in request order).

How an answer to the whole request maps to its members, for every provider
(:func:`whole_batch`):

* a 2xx answer is read item by item (each provider its own way);
* an answer the single-send mapping reads as *refused for good* (a 4xx such as 400,
  413, 422) refuses the request, not a member: nothing was sent, and every member is
  :class:`~outbox_mailer.delivery.SendSingly`, so that one bad member never fails
  the good ones;
* any other answer (401/403, 429, quota, 5xx) means the same for every member as
  for a single send: the single-send mapping is applied to each (so an ambiguous
  5xx is safe to resend inside the key window counted from each member's first
  attempt, or goes through the in-doubt policy where the provider keeps no key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Protocol, TypeGuard

from ..delivery import BatchOutcome, Cause, Delivery, MessageFields, Outcome, SendSingly
from .provider import ApiRequest, ApiResponse, Provider

__all__ = ["BatchItem", "BatchProvider", "batch_provider", "check_members", "whole_batch"]


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One member of a batch request: what ``build`` takes for one message, without the key and the clock
    (a batch's body must be the same bytes on every attempt: its key is reused)."""

    fields: MessageFields
    delivery: Delivery
    message_id: str


class BatchProvider(Provider, Protocol):
    """A :class:`~.provider.Provider` with a batch endpoint."""

    batch_limit: ClassVar[int]  # most members in one request

    def batchable(self, fields: MessageFields, delivery: Delivery) -> bool:
        """Whether the message may go in a batch; the others go singly."""

    def build_batch(self, items: Sequence[BatchItem], key: str) -> ApiRequest:
        """One request for all members, in order; the same items give the same bytes. ValueError
        when it cannot be built (no members, too many, too large)."""

    def interpret_batch(self, response: ApiResponse, deliveries: Sequence[Delivery],
                        now: datetime) -> list[BatchOutcome]:
        """What the answer means for each member: exactly one result per member, in request order."""


def batch_provider(provider: Provider) -> BatchProvider | None:
    """``provider`` when it has a batch endpoint, else None."""
    return provider if _has_batch_endpoint(provider) else None


def _has_batch_endpoint(provider: Provider) -> TypeGuard[BatchProvider]:
    return getattr(provider, "batch_limit", 0) > 0


def check_members(count: int, limit: int, what: str) -> None:
    """Refuse an empty batch or one over the provider's limit (ValueError)."""
    if count < 1:
        raise ValueError(f"a {what} batch needs at least one member")
    if count > limit:
        raise ValueError(f"a {what} batch takes at most {limit} members, not {count}")


def whole_batch(response: ApiResponse, deliveries: Sequence[Delivery], now: datetime,
                single: Callable[[ApiResponse, Delivery, datetime], Outcome]) -> list[BatchOutcome]:
    """A non-2xx answer to the whole request, for each member (the rule in the module docstring).

    ``single`` is the provider's single-send mapping (its ``interpret``).
    """
    outcomes = [single(response, delivery, now) for delivery in deliveries]
    if outcomes and all(outcome.cause is Cause.PERMANENT for outcome in outcomes):
        reason = f"the batch request was refused as a whole ({outcomes[0].error})"
        return [SendSingly(reason, reply_code=response.status) for _ in deliveries]
    return list(outcomes)
