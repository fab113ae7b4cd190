"""Helpers of the DSL: function arity and output-type inference."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any

from kspark.errors import InvalidArgumentError, TypeMappingError
from kspark.plan.types import DYNAMIC, TypeDesc, describe_type


def check_callable(fn: object, what: str, processor: str) -> None:
    if not callable(fn):
        raise InvalidArgumentError(
            f"{processor}: {what} must be callable, got {type(fn).__name__}",
            processor=processor,
            parameter=what,
        )


def positional_arity(fn: Callable[..., Any]) -> int | None:
    """Number of required positional parameters, or None if it cannot be read."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            n += 1
    return n


def takes_key(fn: Callable[..., Any], plain: int, processor: str, what: str) -> bool:
    """Whether ``fn`` takes the key first: ``plain`` arguments without it, one more with it."""
    n = positional_arity(fn)
    if n is None or n == plain:
        return False
    if n == plain + 1:
        return True
    raise InvalidArgumentError(
        f"{processor}: {what} must take {plain} argument(s), or {plain + 1} with the key first; "
        f"it takes {n}",
        processor=processor,
        parameter=what,
    )


def return_hint(fn: Callable[..., Any]) -> Any:
    """What ``fn`` says it returns: a class returns its instances; a function, its
    return annotation; None when it says nothing.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Pair:
    ...     left: str
    ...     right: str
    >>> return_hint(Pair) is Pair
    True
    >>> def joiner(a: str, b: str) -> Pair: return Pair(a, b)
    >>> return_hint(joiner) is Pair, return_hint(lambda a, b: Pair(a, b))
    (True, None)
    """
    if isinstance(fn, type):
        return fn
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    return hints.get("return")


def resolve(explicit: Any, inferred: Any, processor: str, what: str) -> TypeDesc:
    """The declared type if given, else the inferred one; dynamic when neither is known."""
    tp = explicit if explicit is not None else inferred
    if tp is None:
        return DYNAMIC
    try:
        return describe_type(tp)
    except TypeMappingError as exc:
        if explicit is None:
            # an annotation with no Spark counterpart: its values travel as JSON
            return DYNAMIC
        raise TypeMappingError(f"{processor}: {what}: {exc.message}", processor=processor) from exc


def element_hint(tp: Any) -> Any:
    """``T`` from ``Iterable[T]``-like hints, else None."""
    origin = typing.get_origin(tp)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Iterable):
        args = typing.get_args(tp)
        if len(args) == 1:
            return args[0]
    return None


def pair_hints(tp: Any) -> tuple[Any, Any]:
    """``(K, V)`` from a ``tuple[K, V]`` hint, else ``(None, None)``."""
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is not Ellipsis:
            return args[0], args[1]
    return None, None
