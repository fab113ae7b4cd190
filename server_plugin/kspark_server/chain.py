"""Fused stateless stages: a chain of user functions run in one Python pass.

A chain spec (:class:`~kspark_server.spec.ChainSpec`) holds steps (filter, map, flat_map,
branch, ...). :func:`make_chain` turns it into a ``mapInArrow`` function that runs each
step over all the live records of an Arrow batch before the next step starts. The live
records are positions in the batch: a filter drops positions, a fan-out repeats one per
output, and the envelope (topic, offset, headers, ...) reaches the output with one Arrow
``take`` of those positions. Each user-function call is guarded: an exception goes to the
processing exception handler with the record's context (see :mod:`kspark_server.handling`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from kspark_server import codec, columns, handling, recordsize
from kspark_server.handlers import Origin
from kspark_server.live import FAILED, Live, call_each, keep_succeeded, retrying
from kspark_server.records import arrow_record
from kspark_server.spec import (
    ArrowValues,
    BranchStep,
    ChainSpec,
    DedupIdSpec,
    FilterStep,
    FlatMapStep,
    FlatMapValuesStep,
    ForeachStep,
    JsonSpec,
    MapStep,
    MapValuesStep,
    PeekStep,
    PrimSpec,
    SelectKeyStep,
    SpecError,
    Step,
    TableFilterStep,
    TableMapValuesStep,
    TypeSpec,
    check_spec,
)
from kspark_server.transport import arrow_schema

Pair = tuple[Any, Any]


def arrow_type(spark_json: str) -> pa.DataType:
    """The Arrow type of a Spark type given in JSON (``"long"``, a struct...)."""
    field = {"name": "v", "type": json.loads(spark_json), "nullable": True, "metadata": {}}
    return arrow_schema(json.dumps({"type": "struct", "fields": [field]})).field(0).type


def _pair(result: Any, processor: str) -> Pair:
    if isinstance(result, tuple) and len(result) == 2:
        return result
    key = getattr(result, "key", None)
    if key is not None or hasattr(result, "value"):
        return (key, result.value)
    raise TypeError(
        f"{processor}: the mapper must return a (key, value) pair, got {type(result).__name__}"
    )


def _unfit(values: list[Any], type_: pa.DataType, what: str) -> pa.Array | dict[int, Exception]:
    """``values`` as an Arrow array of ``type_``, or, if Arrow refuses them (an ``int`` of
    2**63 or more, a ``Decimal`` beyond (38, 18), a string with a lone surrogate), the
    positions of the values it refuses, each with the error the production handler gets.
    Only a failed batch pays for the search."""
    with contextlib.suppress(pa.ArrowException, OverflowError, TypeError, ValueError):
        return pa.array(values, type=type_)
    bad: dict[int, Exception] = {}
    for j, v in enumerate(values):
        try:
            pa.array([v], type=type_)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            bad[j] = codec.EncodeError(
                f"{what} {_short(v)} does not fit its column type {type_}: "
                f"{type(exc).__name__}: {exc}"
            )
    return bad


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _refuse_unfit(
    guard: handling.Guard,
    processor: str,
    keys: list[Any],
    values: list[Any],
    schema: pa.Schema,
    row: Callable[[int], Any],
) -> list[bool] | dict[str, pa.Array]:
    """The encoded ``keys`` and ``values`` as Arrow columns, or, if Arrow refuses some,
    which records to keep: each refused one goes to the production exception handler,
    with the part that failed."""
    bad: dict[int, tuple[Exception, str]] = {}
    arrays: dict[str, pa.Array] = {}
    for name, cells in (("value", values), ("key", keys)):
        unfit = _unfit(cells, schema.field(name).type, name)
        if isinstance(unfit, pa.Array):
            arrays[name] = unfit
            continue
        for j, exc in unfit.items():
            bad[j] = (exc, name.upper())  # the key's failure is reported if both fail
    if not bad:
        return arrays
    for j in sorted(bad):
        exc, origin = bad[j]
        guard.on_error(
            processor, (keys[j], values[j]), row(j), exc, kind="production", origin=Origin(origin)
        )
    return [j not in bad for j in range(len(keys))]


#: Steps that make a new key, and steps that make a new value: the output of the last one
#: in a chain must fit the type it declares.
_MAKES_KEY = (MapStep, FlatMapStep, SelectKeyStep)
_MAKES_VALUE = (MapStep, MapValuesStep, FlatMapStep, FlatMapValuesStep, TableMapValuesStep)


def output_owners(spec: ChainSpec) -> tuple[str | None, str | None]:
    """The processors whose declared types the chain's output key and value must fit.

    A key or value made by a step (``map_values(f, value_type=int)``) is that step's
    result: if it does not fit, or a dynamic one does not convert, the step failed, and
    its processing handler is asked under its name. A chain without steps that converts a
    dynamic key for a join (``ChainSpec.converts_for``) fails for the join. None where the
    part is what the chain read, unchanged: the production handler's case.
    """
    key: str | None = None
    value: str | None = None
    for step in spec.steps:
        if isinstance(step, _MAKES_KEY):
            key = step.processor
        if isinstance(step, _MAKES_VALUE):
            value = step.processor
    if spec.converts_for is not None:
        if key is None and spec.input.key != spec.output.key:
            key = spec.converts_for
        if value is None and spec.input.value != spec.output.value:
            value = spec.converts_for
    return key, value


def output_encoder(inp: TypeSpec, out: TypeSpec, what: str) -> codec.Codec:
    """The chain's encoder of keys or values of type ``out``. From a dynamic input, values
    of JSON shape (a dict for a record, say) are first converted to the declared type;
    the typed path stays as fast as it was."""
    enc = codec.encoder(out, what)
    if not isinstance(inp, JsonSpec) or isinstance(out, JsonSpec | PrimSpec):
        return enc
    convert = codec.converter(out, what)
    return lambda x: enc(convert(x))


def make_chain(
    spec: ChainSpec,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a chain spec, run step by step over each batch.

    Each step loops over the batch's live records (one guarded call each) before the next
    step starts, so a chain's per-record cost is its user functions' and little else:

    - keys and values become Python objects column by column (:mod:`kspark_server.columns`),
      and only when a step reads them;
    - a column that no step replaced (the key through ``map_values``, the value through a
      ``filter``) goes to the output as the input's Arrow column, taken at the live rows;
    - a new column is type-checked once per batch (the set of its values' types) and
      converted by Arrow; if that fails, the batch's records are encoded one by one, so
      that a wrong value reaches its handler with its record (the processing handler of
      the step that made it, see :func:`output_owners`).

    A record's outputs leave in the order its steps gave them, each record's after the
    previous record's. In a chain with a fan-out, output ``j`` of a record gets the
    ``ks_sub`` ``4096 * ks_sub + j``, which keeps the outputs apart and in order
    downstream.
    """
    check_spec(spec)
    guard = handling.Guard(spec.handling, handling.json_columns(spec))
    kdec = columns.column_decoder(spec.input.key)
    vdec = columns.column_decoder(spec.input.value)
    kcol = _column_output(spec.input.key, spec.output.key, "key")
    vcol = _column_output(spec.input.value, spec.output.value, "value")
    kenc = output_encoder(spec.input.key, spec.output.key, "key")
    venc = output_encoder(spec.input.value, spec.output.value, "value")
    plain_keys = isinstance(spec.input.key, PrimSpec | JsonSpec)
    steps = [_column_step(s, guard, kdec, plain_keys) for s in spec.steps]
    fans_out = any(isinstance(s, FlatMapStep | FlatMapValuesStep) for s in spec.steps)
    owners = output_owners(spec)
    last_processor = spec.steps[-1].processor if spec.steps else spec.sink or "source"
    first_processor = spec.steps[0].processor if spec.steps else last_processor
    # a dynamic column is written afresh even when unchanged: what Spark read may not be
    # kspark's JSON text yet (a JSON string without its quotes, keys unsorted), and equal
    # values must leave as equal text
    same_key = spec.input.key == spec.output.key and not isinstance(spec.input.key, JsonSpec)
    same_value = spec.input.value == spec.output.value and not isinstance(
        spec.input.value, JsonSpec
    )
    schema_json = spec.output_schema
    json_in = isinstance(spec.input.value, JsonSpec) and not isinstance(spec.output.value, JsonSpec)

    def encode(live: Live, schema: pa.Schema) -> dict[str, pa.Array]:
        ktype, vtype = schema.field("key").type, schema.field("value").type
        out: dict[str, pa.Array | None] = {}
        if live.keys_new or not same_key:
            out["key"] = kcol(live.keys(kdec), ktype)
        if live.values_new or not same_value:
            # JSON text that no step decoded is decoded here, to be converted, not cast
            values = live.values() if json_in and not live.values_new else live.arrow_values()
            if isinstance(values, pa.Array):
                out["value"] = values if values.type == vtype else values.cast(vtype)
            else:
                out["value"] = vcol(values, vtype)
        if all(a is not None for a in out.values()):
            return {k: a for k, a in out.items() if a is not None}
        # a value Arrow refused, or of a type the per-value encoder converts: record by
        # record, each failure to its handler (output_owners)
        keys, values = live.keys(kdec), live.values()
        ok_rows: list[bool] = []
        ks: list[Any] = []
        vs: list[Any] = []
        for j, (k, v) in enumerate(zip(keys, values, strict=True)):
            ok, enc = guard.encode(last_processor, kenc, venc, k, v, live.row(j), owners)
            ok_rows.append(ok)
            if ok:
                ks.append(enc[0])
                vs.append(enc[1])
        if not all(ok_rows):
            live.keep(ok_rows)
        # encoded, but Arrow may still refuse a value (see _unfit): find it, report it
        checked = _refuse_unfit(guard, last_processor, ks, vs, schema, live.row)
        if isinstance(checked, dict):
            return checked
        live.keep(checked)
        ks = list(itertools.compress(ks, checked))
        vs = list(itertools.compress(vs, checked))
        return {"key": pa.array(ks, type=ktype), "value": pa.array(vs, type=vtype)}

    def one_batch(batch: pa.RecordBatch, schema: pa.Schema) -> list[pa.RecordBatch]:
        out = []
        side = batch.column("ks_side")
        has_side = side.null_count < len(side)
        records = batch.filter(side.is_null()) if has_side else batch
        live = Live(records, guard, vdec, first_processor)
        for step in steps:
            if not live.rows:
                break
            retrying(step, live)
        if fans_out:  # numbered before encoding, as a failed output keeps its number
            live.subs = _fan_out_subs(records.column("ks_sub"), live.rows)
        if live.rows:
            replaced = retrying(lambda lv: encode(lv, schema), live)
            if fans_out:
                replaced["ks_sub"] = pa.array(live.subs or [], schema.field("ks_sub").type)
            out.append(_assemble_columns(records, schema, live.rows, replaced))
        # no record left (or none at all: a batch of side rows only) takes no column of
        # the input, whose key or value type may not cast to the output's
        if has_side:
            # dead-letter and metric rows pass through, without key and value
            sides = batch.filter(side.is_valid())
            n = sides.num_rows
            nulls = {
                "key": pa.nulls(n, schema.field("key").type),
                "value": pa.nulls(n, schema.field("value").type),
            }
            out.append(_assemble_columns(sides, schema, range(n), nulls))
        out.extend(guard.drain_after(batch, schema))
        return out

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(schema_json)
        for batch in batches:
            # A batch makes ten thousand records at once, each one an object the cyclic
            # garbage collector tracks; its collections then walk every object of the
            # worker (pyspark's modules...) over and over, which doubled the cost of a
            # dataclass chain (docs/design/stateless-chain.md). Records hold no cycles of
            # their own, so the collector waits for the end of the batch, and is never left off
            # while the batch's output is with Spark.
            collecting = gc.isenabled()
            gc.disable()
            try:
                out = one_batch(batch, schema)
            finally:
                if collecting:
                    gc.enable()
            yield from out

    if spec.record_limit is not None:  # it feeds a Kafka sink
        return recordsize.limited(
            spec.record_limit,
            spec.handling,
            run,
            arrow_record,
            handling.json_columns(spec, output=True),
        )
    return run


def _fan_out_subs(subs: pa.Array, rows: list[int] | range) -> list[int]:
    """``4096 * ks_sub + j`` for each live row, ``j`` its rank among the live rows of the
    same input record (which are next to each other)."""
    at = np.fromiter(rows, np.int64, len(rows))
    n = len(at)
    starts = np.ones(n, bool)
    starts[1:] = at[1:] != at[:-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    sub = subs.take(at).to_numpy(zero_copy_only=False).astype(np.int64)
    return (sub * 4096 + np.arange(n) - first).tolist()  # type: ignore[no-any-return]


def _column_output(inp: TypeSpec, out: TypeSpec, what: str) -> columns.ColumnEncoder:
    """The chain's column encoder of keys or values of type ``out``: from a dynamic input,
    values of JSON shape are first converted to the declared type (as
    :func:`output_encoder` does one by one)."""
    col = columns.column_encoder(out, what)
    if not isinstance(inp, JsonSpec) or isinstance(out, JsonSpec | PrimSpec):
        return col
    return columns.mapped(codec.converter(out, what), col)


def constant_widener(
    constants_json: str,
) -> tuple[list[str], Callable[[pa.RecordBatch | pa.Table], Any]]:
    """The names of the constant envelope columns that ``constants_json`` describes, and a
    function that puts them back into a batch or table that lacks them.

    ``constants_json``: a JSON list of ``[name, position, Spark type (JSON), value]``,
    positions in the full batch's column order, ascending; a value ``{"same_as": c}`` is a
    copy of the batch's column ``c`` (``ks_seq``, a file record's ``offset``).

    >>> names, widen = constant_widener('[["topic", 1, "string", "t"]]')
    >>> widen(pa.table({"key": ["a", "b"], "ks_seq": [1, 2]})).to_pydict()
    {'key': ['a', 'b'], 'topic': ['t', 't'], 'ks_seq': [1, 2]}
    """
    constants = [
        (str(n), int(i), arrow_type(json.dumps(t)), v) for n, i, t, v in json.loads(constants_json)
    ]
    names = [n for n, _, _, _ in constants]
    cache: dict[int, list[pa.Array]] = {}

    def arrays(n: int) -> list[pa.Array]:
        if n not in cache:
            if len(cache) > 8:  # batches are mostly of one size; keep a few
                cache.clear()
            cache[n] = [
                pa.nulls(0) if isinstance(v, dict) else pa.array([v] * n, type=t)
                for _, _, t, v in constants
            ]
        return cache[n]

    def widen(batch: Any) -> Any:
        for (name, pos, type_, v), array in zip(constants, arrays(batch.num_rows), strict=True):
            if isinstance(v, dict):
                array = batch.column(v["same_as"])
                array = array if array.type == type_ else array.cast(type_)
            batch = batch.add_column(pos, pa.field(name, type_), array)
        return batch

    return names, widen


def with_constants(
    run: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    constants_json: str,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``run`` (a chain's ``mapInArrow`` function) over batches that lack envelope columns
    whose value is the same for every record, such as a file topic's ``topic``,
    ``partition`` and empty ``headers``.

    Spark's conversion of rows to Arrow and back costs per column and row, an empty
    ``headers`` array of structs most; such columns are left out of the pass and added
    back as literals after it (:func:`kspark.compiler.lowering.build_dataframe`). Inside,
    they are put back into each batch before ``run`` sees it, so that handlers' error
    contexts and dead letters read them as before, and taken out of ``run``'s output.
    A chain never changes them; a side row that the chain made (null in these columns
    before) gets the constants instead, which no reader of side rows looks at.

    ``constants_json``: as :func:`constant_widener` takes it.
    """
    names, widen = constant_widener(constants_json)

    def wrapped(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for out in run(widen(b) for b in batches):
            yield out.drop_columns(names)

    return wrapped


def make_id_stage(
    spec: DedupIdSpec,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that adds ``ks_id`` (the dedup id, as text) to each record,
    so that ``deduplicate`` can repartition by id."""
    check_spec(spec)
    guard = handling.Guard(spec.handling, handling.json_columns(spec))
    kdec = codec.decoder(spec.input.key)
    vdec = codec.decoder(spec.input.value)
    fn, name = spec.id_selector, spec.processor

    def each(row: dict[str, Any]) -> bool:
        if row["ks_side"] is None:
            args = guard.decode(name, kdec, vdec, row)
            if args is None:
                return False
            ok, ident = guard.call(name, fn, args, row)
            if not ok:
                return False
            row["ks_id"] = None if ident is None else repr(codec.hashable(ident))
        return True

    return handling.record_stage(guard, spec.output_schema, each)


# -- the steps: each one over all the live records of a batch -------------------------------

#: A table filter's answer for a delete, which it passes without asking the predicate.
_DELETE: Any = object()

ColumnStep = Callable[[Live], None]


def _column_step(
    step: Step, guard: handling.Guard, kdec: columns.ColumnDecoder, plain_keys: bool
) -> ColumnStep:
    """One step over all the live records of a batch. ``plain_keys``: the input's keys
    decode without fail (no class of the user's builds them)."""
    name = step.processor

    if isinstance(step, FilterStep | TableFilterStep):
        if isinstance(step, FilterStep) and step.vectorized is not None:
            return _vectorized_filter(step, guard)
        fn, negate, table = step.fn, step.negate, isinstance(step, TableFilterStep)

        def pred(k: Any, v: Any) -> Any:
            # a table's deletes pass, and the predicate never sees them
            return _DELETE if table and v is None else fn(k, v)

        def filter_step(live: Live) -> None:
            values = live.values()
            res = call_each(live, name, pred, live.keys(kdec), values)
            # bool() outside the guard: the handler covers the predicate's call
            passed = [r is _DELETE or (r is not FAILED and bool(r) != negate) for r in res]
            if table:
                # a filtered-out table row is not dropped: it becomes a delete
                if not all(passed):
                    live.set_values(
                        [v if ok else None for ok, v in zip(passed, values, strict=True)],
                        live.vdec,
                    )
                keep = [r is not FAILED for r in res]
            else:
                keep = passed
            if not all(keep):
                live.keep(keep)

        return filter_step
    if isinstance(step, MapStep):
        map_fn = step.fn

        def map_step(live: Live) -> None:
            res = call_each(
                live, name, lambda a, b: _pair(map_fn(a, b), name), live.keys(kdec), live.values()
            )
            pairs = keep_succeeded(live, res)
            live.set_keys([p[0] for p in pairs])
            live.set_values([p[1] for p in pairs], live.vdec)

        return map_step
    if isinstance(step, MapValuesStep | TableMapValuesStep):
        if isinstance(step, MapValuesStep) and step.vectorized is not None:
            return _vectorized_map_values(step, guard)
        mv_fn, with_key = step.fn, step.with_key
        table = isinstance(step, TableMapValuesStep)

        def map_values_step(live: Live) -> None:
            values = live.values()
            if table:
                # a table's deletes stay deletes: the mapper never sees them
                fn = mv_fn

                def mv_fn_t(*a: Any) -> Any:
                    return None if a[-1] is None else fn(*a)

                call: Callable[..., Any] = mv_fn_t
            else:
                call = mv_fn
            if with_key:
                res = call_each(live, name, call, live.keys(kdec), values)
            else:
                res = call_each(live, name, call, values)
            live.set_values(keep_succeeded(live, res), live.vdec)

        return map_values_step
    if isinstance(step, SelectKeyStep):
        sk_fn = step.fn

        def select_key_step(live: Live) -> None:
            res = call_each(live, name, sk_fn, live.keys(kdec), live.values())
            live.set_keys(keep_succeeded(live, res))

        return select_key_step
    if isinstance(step, ForeachStep):
        each_fn = step.fn

        def foreach_step(live: Live) -> None:
            call_each(live, name, each_fn, live.keys(kdec), live.values())
            live.keep([False] * len(live.rows))  # the stream ends here

        return foreach_step
    if isinstance(step, PeekStep):
        peek_fn = step.fn

        def peek_step(live: Live) -> None:
            keep_succeeded(live, call_each(live, name, peek_fn, live.keys(kdec), live.values()))

        return peek_step
    if isinstance(step, BranchStep):
        preds, index = step.predicates, step.index

        def first_true(k: Any, v: Any) -> int:
            for i, p in enumerate(preds):
                if p(k, v):
                    return i
            return len(preds)

        split = step.split or name  # as in the per-record step

        def branch_step(live: Live) -> None:
            res = call_each(live, split, first_true, live.keys(kdec), live.values())
            keep = [r == index and r is not FAILED for r in res]
            if not all(keep):
                live.keep(keep)

        return branch_step
    if isinstance(step, FlatMapStep | FlatMapValuesStep):
        fm_fn, pairs = step.fn, isinstance(step, FlatMapStep)
        with_key = isinstance(step, FlatMapStep) or step.with_key

        # the whole iterable inside the guard: a failure midway drops all its outputs
        def expand_pairs(k: Any, v: Any) -> list[Pair]:
            out = list(fm_fn(k, v))
            for x in out:
                if type(x) is not tuple or len(x) != 2:
                    return [_pair(x, name) for x in out]  # a KeyValue, say
            return out

        def expand_values(*args: Any) -> Any:
            out = fm_fn(*args)
            return out if type(out) is list else list(out)

        expand = expand_pairs if pairs else expand_values

        def flat_map_step(live: Live) -> None:
            if not plain_keys:
                # keys that a class may refuse are decoded before the fan-out: a record
                # that cannot be read fails once, not once per output
                live.keys(kdec)
            values = live.values()
            if with_key:
                res = call_each(live, name, expand, live.keys(kdec), values)
            else:
                res = call_each(live, name, expand, values)
            live.fan_out(res, pairs)

        return flat_map_step
    raise SpecError(f"unknown step op {type(step).__name__!r}")


def _assemble_columns(
    batch: pa.RecordBatch,
    schema: pa.Schema,
    rows: list[int] | range,
    replaced: dict[str, pa.Array],
) -> pa.RecordBatch:
    """The output batch: rows ``rows`` of ``batch``, with the ``replaced`` columns new.
    ``rows`` is a range while every row is live once (a list as long as the batch may
    repeat a row and leave out another: a fan-out)."""
    if isinstance(rows, range) and len(rows) == batch.num_rows:
        taken = batch
    else:
        # numpy reads a list of ints faster than pyarrow does
        taken = batch.take(np.fromiter(rows, np.int64, len(rows)))
    cols = []
    for f in schema:
        if f.name in replaced:
            cols.append(replaced[f.name])
            continue
        pos = taken.schema.get_field_index(f.name)
        if pos < 0:
            cols.append(pa.nulls(len(rows), f.type))
        else:
            col = taken.column(pos)
            cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# -- vectorized steps ------------------------------------------------------------------------


class _ArrowTypes:
    """The Arrow types of a vectorized step's values, read when the step first runs (in
    the worker, as the chain's output schema is)."""

    __slots__ = ("_after", "_before", "_types")

    def __init__(self, types: ArrowValues) -> None:
        self._types = types
        self._before: pa.DataType | None = None
        self._after: pa.DataType | None = None

    @property
    def before(self) -> pa.DataType:
        if self._before is None:
            self._before = arrow_type(self._types.before_spark)
        return self._before

    @property
    def after(self) -> pa.DataType:
        if self._after is None:
            self._after = arrow_type(self._types.after_spark)
        return self._after


def _vectorized_input(live: Live, name: str, before: TypeSpec, type_: pa.DataType) -> pa.Array:
    """The live values as an Arrow array of the step's input type."""
    values = live.arrow_values()
    if isinstance(values, pa.Array):
        return values if values.type == type_ else values.cast(type_)
    arr = columns.column_encoder(before)(values, type_)
    if arr is not None:
        return arr
    # a value of the wrong type for the step: that record fails, the others go on
    enc = codec.encoder(before)
    res = call_each(live, name, enc, values)
    return pa.array(keep_succeeded(live, res), type=type_)


def _run_vectorized(
    live: Live,
    name: str,
    fn: Callable[[pa.Array], Any],
    arr: pa.Array,
    type_: pa.DataType,
    before_dec: columns.ColumnDecoder,
) -> pa.Array:
    """``fn(arr)`` as an array of ``type_`` and ``arr``'s length. If it raises, the batch
    runs again record by record (``fn`` on one-value arrays), so that only the failing
    records go to the handler; the result has :data:`FAILED` rows removed from ``live``.
    """

    def call(a: pa.Array) -> pa.Array:
        return _vector_result(name, fn(a), len(a), type_)

    with contextlib.suppress(Exception):  # found again, record by record, below
        return call(arr)
    parts: list[pa.Array] = []
    keep: list[bool] = []
    for j in range(len(arr)):
        one = arr.slice(j, 1)
        try:
            parts.append(call(one))
            keep.append(True)
        except Exception as exc:
            # the handler sees the value as a per-record step would
            live.fail(name, (before_dec(one)[0],), j, exc)
            keep.append(False)
    if not all(keep):
        live.keep(keep)
    return pa.concat_arrays(parts) if parts else pa.nulls(0, type_)


def _vector_result(name: str, out: Any, n: int, type_: pa.DataType) -> pa.Array:
    """A vectorized function's result ``out`` as an array of ``n`` values of ``type_``."""
    res = out if isinstance(out, pa.Array | pa.ChunkedArray) else pa.array(out)
    if isinstance(res, pa.ChunkedArray):
        res = res.combine_chunks()
    if len(res) != n:
        raise ValueError(
            f"{name}: a vectorized function must return as many values as it is given "
            f"({n}), returned {len(res)}"
        )
    return res if res.type == type_ else res.cast(type_)


def _vectorized_map_values(step: MapValuesStep, guard: handling.Guard) -> ColumnStep:
    assert step.vectorized is not None
    types, fn, name = step.vectorized, step.fn, step.processor
    before_dec, after_dec = (
        columns.column_decoder(types.before),
        columns.column_decoder(types.after),
    )
    arrow = _ArrowTypes(types)

    def vectorized_map_values(live: Live) -> None:
        arr = _vectorized_input(live, name, types.before, arrow.before)
        if not live.rows:
            return
        live.set_values(_run_vectorized(live, name, fn, arr, arrow.after, before_dec), after_dec)

    return vectorized_map_values


def _vectorized_filter(step: FilterStep, guard: handling.Guard) -> ColumnStep:
    assert step.vectorized is not None
    types, fn, name, negate = step.vectorized, step.fn, step.processor, step.negate
    before_dec = columns.column_decoder(types.before)
    arrow = _ArrowTypes(types)

    def vectorized_filter(live: Live) -> None:
        arr = _vectorized_input(live, name, types.before, arrow.before)
        if not live.rows:
            return
        flags = _run_vectorized(live, name, fn, arr, pa.bool_(), before_dec).to_pylist()
        # a null is neither true nor false: the record is dropped
        keep = [f is not None and f != negate for f in flags]
        if not all(keep):
            live.keep(keep)

    return vectorized_filter
