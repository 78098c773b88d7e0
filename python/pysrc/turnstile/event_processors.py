"""rate-limiter-py's token removal from CloudWatch / EventBridge events: ``EventProcessorManager``,
``EventProcessor`` and ``ProcessorPredicate`` (a Python callable on an event field). Removal is
Turnstile's (``remove_by_resource_id``): the resource is recorded as ended first, so a bind racing
the event releases itself instead of holding capacity forever."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Dict, List, Optional

from . import _check, _native

logger = logging.getLogger(__name__)


def _reduce_to_path(obj: Any, path: Any) -> Any:
    try:
        if isinstance(path, str):
            path = path.split(".")
        return functools.reduce(lambda x, y: x[y], path, obj)
    except Exception:
        return None


def _build_processor_key(source: str, type: Optional[str] = None) -> str:
    return source + ":" + type.replace(" ", "").lower() if type else source


class ProcessorPredicate:
    """``pred_func`` applied to the value at dotted path ``key``; combined with ``with_and`` /
    ``with_or``. A missing or empty value is False."""

    def __init__(self, key: str, pred_func: Callable[[Any], bool],
                 and_preds: Optional[List["ProcessorPredicate"]] = None,
                 or_preds: Optional[List["ProcessorPredicate"]] = None) -> None:
        self.key = _check.text("key", key)
        if not callable(pred_func):
            raise TypeError(f"pred_func must be callable, not {type(pred_func).__name__}")
        self.pred_func = pred_func
        self.and_preds = and_preds if and_preds else []
        self.or_preds = or_preds if or_preds else []

    def with_and(self, add_pred: "ProcessorPredicate") -> "ProcessorPredicate":
        self.and_preds.append(add_pred)
        return self

    def with_or(self, add_pred: "ProcessorPredicate") -> "ProcessorPredicate":
        self.or_preds.append(add_pred)
        return self

    def test(self, event: Dict[str, Any]) -> bool:
        value = _reduce_to_path(event, self.key)
        result = bool(self.pred_func(value)) if value else False
        if self.and_preds and result:
            for pred in self.and_preds:
                result &= pred.test(event)
                if not result:
                    break
        elif self.or_preds and not result:
            for pred in self.or_preds:
                result |= pred.test(event)
                if result:
                    break
        return result


class EventProcessor:
    """Events of ``source`` (and ``type``, the detail-type, when given) whose ``predicate`` holds
    name the resource id at dotted path ``id_path``."""

    def __init__(self, source: str, id_path: str, predicate: Optional[ProcessorPredicate] = None,
                 type: Optional[str] = None) -> None:
        self.source = _check.text("source", source)
        self.id_path = _check.text("id_path", id_path)
        self.predicate = predicate
        self.type = type

    def test_and_get_id(self, event: Dict[str, Any]) -> Any:
        if self.predicate and not self.predicate.test(event):
            return None
        return _reduce_to_path(event, self.id_path)


class EventProcessorManager:
    """Removes the non-fungible tokens of the resources that events say have ended.

    ``table_name`` (``NON_FUNGIBLE_TABLE``) and ``index_name`` (``NON_FUNGIBLE_RES_INDEX``) name the
    token table and its resource index."""

    def __init__(self, table_name: Optional[str] = None, index_name: Optional[str] = None,
                 processors: Optional[List[EventProcessor]] = None) -> None:
        self.processors = {_build_processor_key(x.source, x.type): x for x in processors} if processors else {}
        self.table_name = _check.table("table_name", table_name, "NON_FUNGIBLE_TABLE", "non-fungible-tokens")
        self.index_name = _check.table("index_name", index_name, "NON_FUNGIBLE_RES_INDEX", "resource-index")
        self.cache: List[str] = []

    def add_processor(self, processor: EventProcessor) -> None:
        self.processors[processor.source] = processor

    def _get_processor(self, event: Dict[str, Any]) -> EventProcessor:
        if "source" not in event:
            raise ValueError("Cannot process event, source is a required field. Event: " + str(event))
        source = event["source"]
        key = _build_processor_key(source, event.get("detail-type"))
        processor = self.processors.get(key) or self.processors.get(source)
        if not processor:
            raise ValueError("No processor for event source: " + source)
        return processor

    def _resource_id(self, event: Dict[str, Any]) -> Optional[str]:
        resource_id = self._get_processor(event).test_and_get_id(event)
        if not resource_id or resource_id in self.cache:
            return None
        return str(resource_id)

    def process_event(self, event: Dict[str, Any]) -> int:
        """Removes the event's resource token(s); answers how many were removed."""
        resource_id = self._resource_id(event)
        if resource_id is None:
            return 0
        removed = _native.remove_by_resource_id(resource_id, self.table_name, self.index_name)
        if not removed:
            logger.warning("Could not find a token for resource %s", resource_id)
        self.cache.append(resource_id)
        return removed

    async def process_event_async(self, event: Dict[str, Any]) -> int:
        resource_id = self._resource_id(event)
        if resource_id is None:
            return 0
        removed = await _native.remove_by_resource_id_async(resource_id, self.table_name, self.index_name)
        self.cache.append(resource_id)
        return removed
