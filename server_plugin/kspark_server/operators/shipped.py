"""The stateful processor that the client ships: a spec, and no operator yet.

``transformWithStateInPandas`` takes a ``StatefulProcessor`` object, which the client
pickles into the query. The client builds no operator: :class:`ShippedOperator` holds the
operator's checked, versioned spec and the description of its constant columns, and the
worker builds the operator (:func:`kspark_server.operators.registry.make_operator`) when
it first meets the task's records.

The workers cannot import ``kspark_server``: its code travels by value
(``kspark.runtime.shipping``). So the processor carries the operators' code as a pickle of
its own, made when the processor is pickled (when the query's plan is sent) and loaded on
the worker at the first batch. Spark's driver-side planning runner unpickles the processor
at every query start and calls its ``init`` to learn the state variables: that needs
pyspark's types only (:mod:`kspark_server.statevars`), so the runner loads none of the
operators' modules, nor pandas, numpy, msgspec or lmdb.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from kspark_server import statevars
from kspark_server.spec import StatefulSpec, check_spec

if TYPE_CHECKING:
    import pandas as pd

    from kspark_server.operators.base import TaskProcessor

__all__ = ["ShippedOperator"]


class ShippedOperator(StatefulProcessor):
    """The processor of a stateful ``spec``, built into its operator on the worker.

    ``constants_json`` describes the envelope columns that are the same for every record
    and travel outside the operator (:func:`kspark_server.chain.constant_widener`).
    """

    def __init__(self, spec: StatefulSpec, constants_json: str = "", code: bytes = b"") -> None:
        self.spec = check_spec(spec)
        self.constants_json = constants_json
        #: the pickled :func:`~kspark_server.operators.registry.make_operator` (empty: not
        #: pickled yet, import it)
        self.code = code
        self._state: statevars.StateVars | None = None
        self._operator: TaskProcessor | None = None

    def __reduce__(self) -> tuple[Callable[..., ShippedOperator], tuple[Any, ...]]:
        # pickled with the code of the operators, as the code is shipped (by value, or
        # by reference where kspark_server is installed); imported here, on the client,
        # only when the query's plan is sent
        from pyspark import cloudpickle

        from kspark_server.operators.registry import make_operator

        code = self.code or cloudpickle.dumps(make_operator)  # type: ignore[no-untyped-call]
        return (ShippedOperator, (self.spec, self.constants_json, code))

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._state = statevars.declare(handle, self.spec.store)
        self._operator = None

    def operator(self) -> TaskProcessor:
        """The operator, built on first use (in a worker, never in the planning runner)."""
        if self._operator is None:
            if self._state is None:
                raise RuntimeError(f"{self.spec.processor}: the operator ran before init")
            if self.code:
                make_operator = pickle.loads(self.code)
            else:
                from kspark_server.operators.registry import make_operator
            op = make_operator(self.spec, self.constants_json)
            op.attach(self._state)
            self._operator = op
        return self._operator

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        return self.operator().handleInputRows(key, rows, timerValues)

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        self.operator().handleInitialState(key, initialState, timerValues)

    def close(self) -> None:
        if self._operator is not None:
            self._operator.close()
