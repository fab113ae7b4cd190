"""The contract's check: every operator spec (:data:`OperatorSpec`) and
:func:`check_spec`, which an operator calls before it runs a spec it was shipped.

It stands above all the spec modules, since it names every operator kind.
"""

from __future__ import annotations

from typing import TypeVar, get_args

from kspark_server.contract.sinks import SinksSpec, TopicNameSpec
from kspark_server.contract.stateful import StatefulSpec
from kspark_server.contract.stateless import ChainSpec, DedupIdSpec, JoinKeySpec
from kspark_server.contract.version import SPEC_VERSION, SpecError

__all__ = ["OperatorSpec", "check_spec"]

OperatorSpec = ChainSpec | DedupIdSpec | JoinKeySpec | StatefulSpec | SinksSpec | TopicNameSpec
_OPERATORS: tuple[type, ...] = get_args(OperatorSpec)


_S = TypeVar("_S", bound=OperatorSpec)


def check_spec(spec: _S) -> _S:
    """``spec``, if this package can run it; raise :class:`SpecError` if not."""
    if not isinstance(spec, _OPERATORS):
        kind = getattr(spec, "kind", None)
        raise SpecError(
            f"unknown operator kind {kind!r}"
            if kind is not None
            else f"not an operator spec: {type(spec).__name__}"
        )
    if spec.spec_version != SPEC_VERSION:
        raise SpecError(
            f"operator spec version {spec.spec_version!r} is not supported by this "
            f"kspark_server (supports {SPEC_VERSION}); use the same kspark version on client "
            "and server"
        )
    return spec
