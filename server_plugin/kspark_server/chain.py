"""Fused stateless stages: a chain of user functions run in one Python pass.

A chain spec (:class:`~kspark_server.spec.ChainSpec`) holds steps (filter, map, ...). :func:`make_chain` turns it into
a ``mapInArrow`` function: each Arrow batch is decoded once, every record goes through all
steps, and the results are encoded once. Each user-function call is guarded: an exception
goes to the processing exception handler (see :mod:`kspark_server.handling`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from kspark_server import codec, handling
from kspark_server.spec import (
    BranchStep,
    ChainSpec,
    DedupIdSpec,
    FilterStep,
    FlatMapStep,
    FlatMapValuesStep,
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

Pair = tuple[Any, Any]
# A step maps one (key, value) to a list of pairs: [] drops, [p] passes one, more fan out.
StepFn = Callable[[Any, Any, dict[str, Any]], list[Pair]]


def arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of a Spark schema, timestamps as UTC instants.

    pyspark's own Arrow UDFs type their results the same way (``timezone="UTC"``); it
    also makes a naive datetime a UTC one (docs/concepts.md, "Time zones"), and without
    a zone ``to_arrow_schema`` refuses a ``timestamp`` field.
    """
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    return to_arrow_schema(StructType.fromJson(_loads(schema_json)), timezone="UTC")


def _loads(s: str) -> Any:
    import json

    return json.loads(s)


def _pair(result: Any, processor: str) -> Pair:
    if isinstance(result, tuple) and len(result) == 2:
        return result
    key = getattr(result, "key", None)
    if key is not None or hasattr(result, "value"):
        return (key, result.value)
    raise TypeError(
        f"{processor}: the mapper must return a (key, value) pair, got {type(result).__name__}"
    )


def make_step(step: Step, guard: handling.Guard) -> StepFn:
    """One step as a function of ``(key, value, row)`` to a list of pairs."""
    name = step.processor
    call = guard.call  # (processor, fn, args, row) -> (ok, result)

    if isinstance(step, FilterStep | TableFilterStep):
        fn, negate, table = step.fn, step.negate, isinstance(step, TableFilterStep)

        def filter_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            if table and v is None:
                return [(k, v)]
            ok, keep = call(name, fn, (k, v), row)
            if not ok:
                return []
            if bool(keep) != negate:
                return [(k, v)]
            return [(k, None)] if table else []

        return filter_step
    if isinstance(step, MapStep):
        map_fn = step.fn

        def map_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            ok, r = call(name, lambda a, b: _pair(map_fn(a, b), name), (k, v), row)
            return [r] if ok else []

        return map_step
    if isinstance(step, MapValuesStep | TableMapValuesStep):
        mv_fn, with_key = step.fn, step.with_key
        table = isinstance(step, TableMapValuesStep)

        def map_values_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            if table and v is None:
                return [(k, None)]
            ok, r = call(name, mv_fn, (k, v) if with_key else (v,), row)
            return [(k, r)] if ok else []

        return map_values_step
    if isinstance(step, FlatMapStep):
        fm_fn = step.fn

        def flat_map_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            ok, r = call(name, lambda a, b: [_pair(x, name) for x in fm_fn(a, b)], (k, v), row)
            return r if ok else []

        return flat_map_step
    if isinstance(step, FlatMapValuesStep):
        fmv_fn, fmv_with_key = step.fn, step.with_key

        def flat_map_values_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            args = (k, v) if fmv_with_key else (v,)
            ok, r = call(name, lambda *a: [(k, x) for x in fmv_fn(*a)], args, row)
            return r if ok else []

        return flat_map_values_step
    if isinstance(step, SelectKeyStep):
        sk_fn = step.fn

        def select_key_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            ok, r = call(name, sk_fn, (k, v), row)
            return [(r, v)] if ok else []

        return select_key_step
    if isinstance(step, PeekStep):
        peek_fn = step.fn

        def peek_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            ok, _ = call(name, peek_fn, (k, v), row)
            return [(k, v)] if ok else []

        return peek_step
    if isinstance(step, BranchStep):
        preds, index = step.predicates, step.index

        def first_true(k: Any, v: Any) -> int:
            for i, p in enumerate(preds):
                if p(k, v):
                    return i
            return len(preds)

        def branch_step(k: Any, v: Any, row: dict[str, Any]) -> list[Pair]:
            ok, i = call(name, first_true, (k, v), row)
            return [(k, v)] if ok and i == index else []

        return branch_step
    raise SpecError(f"unknown step op {type(step).__name__!r}")


class LazyRow:
    """One record of an Arrow batch, read field by field only when asked.

    The error path needs the whole envelope (topic, offset, headers...) of a failing
    record; the happy path needs only key and value, so nothing else is converted.
    """

    __slots__ = ("_batch", "_i")

    def __init__(self, batch: pa.RecordBatch, i: int) -> None:
        self._batch, self._i = batch, i

    def get(self, name: str, default: Any = None) -> Any:
        col = self._batch.schema.get_field_index(name)
        if col < 0:
            return default
        return self._batch.column(col)[self._i].as_py()

    def __getitem__(self, name: str) -> Any:
        return self.get(name)


def _assemble(
    batch: pa.RecordBatch,
    schema: pa.Schema,
    idx: list[int],
    replaced: dict[str, list[Any]],
) -> pa.RecordBatch:
    """The output batch: rows ``idx`` of ``batch``, with the ``replaced`` columns new."""
    taken = batch.take(pa.array(idx, pa.int64())) if len(idx) != batch.num_rows else batch
    cols = []
    for f in schema:
        if f.name in replaced:
            cols.append(pa.array(replaced[f.name], type=f.type))
            continue
        pos = taken.schema.get_field_index(f.name)
        if pos < 0:
            cols.append(pa.nulls(len(idx), f.type))
        else:
            col = taken.column(pos)
            cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


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
    """The ``mapInArrow`` function of a chain spec.

    Only the key and value columns become Python objects; the rest of the envelope stays in
    Arrow and is carried over with ``take`` (a fan-out repeats a row's index).
    """
    check_spec(spec)
    guard = handling.Guard(spec.handling)
    kdec = codec.decoder(spec.input.key)
    vdec = codec.decoder(spec.input.value)
    kenc = output_encoder(spec.input.key, spec.output.key, "key")
    venc = output_encoder(spec.input.value, spec.output.value, "value")
    steps = [make_step(s, guard) for s in spec.steps]
    fans_out = any(isinstance(s, FlatMapStep | FlatMapValuesStep) for s in spec.steps)
    last_processor = spec.steps[-1].processor if spec.steps else "source"
    schema_json = spec.output_schema
    encode = guard.encode

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(schema_json)
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            is_side = batch.column("ks_side").is_valid().to_pylist()
            subs = batch.column("ks_sub").to_pylist() if fans_out else []
            idx: list[int] = []
            out_k: list[Any] = []
            out_v: list[Any] = []
            out_sub: list[Any] = []
            for i in range(batch.num_rows):
                if is_side[i]:  # dead-letter and metric rows pass through
                    idx.append(i)
                    out_k.append(None)
                    out_v.append(None)
                    if fans_out:
                        out_sub.append(subs[i])
                    continue
                row: Any = LazyRow(batch, i)
                pairs: list[Pair] = [(kdec(keys[i]), vdec(values[i]))]
                for step in steps:
                    if len(pairs) == 1:
                        pairs = step(pairs[0][0], pairs[0][1], row)
                    else:
                        nxt: list[Pair] = []
                        for k, v in pairs:
                            nxt.extend(step(k, v, row))
                        pairs = nxt
                    if not pairs:
                        break
                for j, (k, v) in enumerate(pairs):
                    ok, enc = encode(last_processor, kenc, venc, k, v, row)
                    if not ok:
                        continue
                    idx.append(i)
                    out_k.append(enc[0])
                    out_v.append(enc[1])
                    if fans_out:
                        out_sub.append(subs[i] * 4096 + j)
            replaced: dict[str, list[Any]] = {"key": out_k, "value": out_v}
            if fans_out:
                replaced["ks_sub"] = out_sub
            yield _assemble(batch, schema, idx, replaced)
            if guard.side or guard.dropped:
                first = batch.slice(0, 1).to_pylist()[0]
                chunk = f"{last_processor}:{first['ks_seq']}:{first['ks_sub']}"
                yield from guard.drain_batches(schema, chunk)

    return run


def make_id_stage(
    spec: DedupIdSpec,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that adds ``ks_id`` (the dedup id, as text) to each record,
    so that ``deduplicate`` can repartition by id."""
    check_spec(spec)
    guard = handling.Guard(spec.handling)
    kdec = codec.decoder(spec.input.key)
    vdec = codec.decoder(spec.input.value)
    fn, name = spec.id_selector, spec.processor
    schema_json = spec.output_schema

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(schema_json)
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                if row["ks_side"] is None:
                    ok, ident = guard.call(name, fn, (kdec(row["key"]), vdec(row["value"])), row)
                    if not ok:
                        continue
                    row["ks_id"] = None if ident is None else repr(codec.hashable(ident))
                out.append(row)
            yield pa.RecordBatch.from_pylist(out, schema=schema)
            if guard.side or guard.dropped:
                yield from guard.drain_batches(schema, f"{name}:{out[0]['ks_seq'] if out else ''}")

    return run
