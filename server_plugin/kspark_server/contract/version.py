"""The version of the operator-spec contract, and the error of a spec that breaks it.

It stands apart, at the bottom of the contract (:mod:`kspark_server.spec`), because
every operator spec carries :data:`SPEC_VERSION` as the default of its ``spec_version``
and every spec's own checks raise :class:`SpecError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SPEC_VERSION", "Fn", "SpecError"]

#: The version of this contract; a client and the operators it runs must agree on it.
#: 5: dynamic keys and values (:class:`JsonSpec`); 6: vectorized steps; 7: chains that
#: feed Kafka sinks check record sizes (:class:`RecordLimit`) and name the step whose
#: type a value must fit (``ChainSpec.converts_for``); 8: stateful operators take their
#: state's tuning and checks from the spec (:class:`StateOptions`); 9: ``foreach`` steps,
#: and sinks whose topic each record names (:class:`TopicNameSpec`,
#: :class:`DynamicSinkSpec`); 10: global-table joins (:class:`JoinKeySpec`,
#: ``JoinSpec.global_table``); 11: foreign-key joins (:class:`FkSubscribeSpec`,
#: :class:`FkMatchSpec`, :class:`FkResolveSpec`) and re-grouped tables
#: (:class:`TableGroupBySpec`, ``AggregateSpec.table`` and ``subtractor``); 12:
#: time-limited suppression (:class:`SuppressSpec`), cogrouped aggregations
#: (``AggregateSpec.cogroup``, :class:`CogroupInput`), sliding windows
#: (``AggregateSpec.sliding``) and windowed stores' retention (``AggregateSpec.retention_ms``),
#: and global stores of processors (:class:`GlobalStoreSpec`, ``ProcessorSpec.global_store``);
#: 13: local stores are kept per application (``StateOptions.application_id``) and reused
#: across restarts.
SPEC_VERSION = 13

#: A user function a spec carries (a mapper, a predicate, a joiner...).
Fn = Callable[..., Any]


class SpecError(ValueError):
    """The client sent a spec this server package cannot run."""
