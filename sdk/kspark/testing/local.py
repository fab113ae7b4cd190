"""The test driver's in-process engine: the compiled stages run by ``kspark_server``'s own
code, with no Spark server.

:class:`LocalEngine` takes the same :class:`~kspark.compiler.stages.Output` that the Spark
path lowers to DataFrames, and runs each stage as Spark would run it, one micro-batch per
:meth:`LocalEngine.run`:

- a source's records take the envelope's form (:mod:`kspark_server.envelope`);
- a :class:`~kspark.compiler.stages.Chain` runs the chain's ``mapInArrow`` function
  (:func:`kspark_server.chain.make_chain`) over the records, as a Spark worker does;
- a :class:`~kspark.compiler.stages.Stateful` stage places each record in the task that
  Spark's ``pmod(hash(key), n)`` gives it (:func:`kspark_server.placement.spark_hasher`),
  hands each task's records to the function ``applyInPandasWithState`` runs
  (:class:`kspark_server.operators.grouped.GroupedOperator`): the operator keeps its
  durable state (base and log, :mod:`kspark_server.taskstate`) in task files under the
  engine's folder, its committed version in the engine's stand-in for Spark's group state,
  and works on a local store in the driver's temporary folder, exactly as on an executor;
- the sinks take their records as the ``foreachBatch`` writer does
  (:mod:`kspark_server.sinks`): in source order, each with its output partition
  ``pmod(hash(key), partitions)``; dead-letter side rows become the dead-letter topic's
  records, and every side row is counted in the app's metrics.

Every stateful operator runs in-process (:data:`LOCAL_OPERATORS`): the Processor API's
with its stores and punctuators (wall-clock ones read the driver's clock,
:attr:`LocalEngine.clock`), a table's ``group_by``, the foreign-key join's three operators,
a global table's join (its records placed by the table key that
:class:`~kspark.compiler.stages.JoinKeyStage` gives them); so do sinks whose records name
their topics. What only Spark runs (``filter_expr``'s SQL, a pattern source, Kafka or
table topics, a rescale) is refused with :class:`~kspark.errors.EngineNotSupportedError`,
naming the processor and ``engine="spark"``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kspark.compiler import stages as st
from kspark.errors import (
    DeserializationError,
    EngineNotSupportedError,
    HandlerError,
    ProcessingError,
    StreamsAppError,
    SuppressionBufferFullError,
)
from kspark.runtime.metrics import INPUT_METRICS_PREFIX, OBSERVED_METRICS, Batches, Metrics
from kspark.testing.localcolumns import (
    b64,
    broadcast,
    cogrouped,
    json_safe,
    json_text,
    packed_column,
    to_arrow_value,
)
from kspark.testing.localstate import GroupState
from kspark_server import envelope as env
from kspark_server import placement, taskstate, transport
from kspark_server.envelope import SIDE_IDENTITY, SideKind
from kspark_server.taskfiles import TaskFiles

__all__ = ["LocalEngine", "Rows", "unsupported"]

#: A topic's records of one micro-batch, as the test driver buffers them.
Rows = list[dict[str, Any]]

#: The stateful operators the in-process engine runs (a spec's ``kind``).
LOCAL_OPERATORS = frozenset(
    {
        "aggregate",
        "dedup",
        "fkmatch",
        "fkresolve",
        "fksubscribe",
        "join",
        "processor",
        "suppress",
        "tablegroupby",
        "tablejoin",
        "windowjoin",
    }
)

_SWITCH = 'TopologyTestDriver(..., engine="spark")'

#: The stages the engine knows (each checked further by ``LocalEngine._check``).
_RUNS = (
    st.Read,
    st.Chain,
    st.SqlFilter,
    st.IdStage,
    st.JoinKeyStage,
    st.TopicNameStage,
    st.Union,
    st.Cogroup,
    st.Shuffle,
    st.Stateful,
)


def unsupported(processor: str, what: str) -> EngineNotSupportedError:
    """The error for ``processor``, which needs Spark for ``what``."""
    return EngineNotSupportedError(
        f"{processor}: {what} runs only on Spark; run this test with {_SWITCH}",
        processor=processor,
        engine="local",
    )


def _arrow_schema(schema_json: str) -> pa.Schema:
    return transport.arrow_schema(schema_json)


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _side_of(text: str) -> dict[str, Any]:
    side: dict[str, Any] = json.loads(text)
    return side


class LocalEngine:
    """Runs a compiled app in this process, one micro-batch per :meth:`run`.

    ``output`` is what :func:`kspark.compiler.compile_topology` gives (the Spark path
    lowers the same object); ``state_dir`` is where the operators' local stores live;
    ``clock`` (ms) is the processors' wall clock (None: the system's).
    Output topics' records are kept in :attr:`topics`, batch by batch.
    """

    def __init__(
        self,
        output: st.Output,
        application_id: str,
        state_dir: str,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.output = output
        #: the wall clock (ms) the operators read: the driver's, or the system's
        self.clock = clock
        self.application_id = application_id
        self.state_dir = self._state_root = state_dir
        # the operators' task files (kspark_server.taskfiles), kept across restarts as
        # under a query's checkpoint
        self._grouped_root = state_dir + "-checkpoint"
        self._restarts = 0
        #: topic name -> its records, one list per micro-batch that wrote to it
        self.topics: dict[str, list[Rows]] = {}
        #: (stateful stage, task key) -> the task's group state (Spark's state store)
        self.durable: dict[tuple[int, int], dict[str, Any]] = {}
        self._chains: dict[int, Callable[[Any], Iterator[pa.RecordBatch]]] = {}
        self._batches = Batches()
        self._batch_id = 0
        self._check()

    # -- what the engine runs -----------------------------------------------------------
    def _check(self) -> None:
        """Refuse, before anything runs, a stage the engine cannot run exactly as Spark."""
        for stage in self.output.stages():
            if not isinstance(stage, _RUNS):
                raise unsupported(type(stage).__name__, "this kind of stage")
            if isinstance(stage, st.SqlFilter):
                raise unsupported(stage.processor, f"filter_expr({stage.condition!r}), Spark SQL,")
            if isinstance(stage, st.Read):
                t = stage.topic
                if t.format != "parquet" or t.option_dict().get("kspark.pattern") == "true":
                    raise unsupported(stage.processor, f"reading a {t.format} or pattern topic")
            if isinstance(stage, st.Stateful):
                spec = stage.spec
                if spec.kind not in LOCAL_OPERATORS:
                    raise unsupported(spec.processor, f"the {spec.kind} operator")
                for name, packed, tp in (
                    ("value", spec.packed.value, stage.stream.value_type),
                    (
                        "table value",
                        spec.packed.tvalue,
                        stage.table.value_type if stage.table is not None else None,
                    ),
                ):
                    if packed and tp is not None and not json_safe(tp.spark_json()):
                        raise unsupported(
                            spec.processor,
                            f"a {name} of type {tp.display()} through Spark's JSON functions",
                        )
                out_value = json.loads(spec.output_schema)["fields"][1]["type"]
                if spec.packed.out and not json_safe(out_value):
                    raise unsupported(
                        spec.processor, "an output value through Spark's JSON functions"
                    )
        for part in self.output.sinks:
            if part.topic.format not in ("parquet",):
                raise unsupported(part.processor, f"writing a {part.topic.format} topic")
        processors = {part.index: part.processor for part in self.output.dynamic}
        for d in self.output.writer_spec.dynamic:
            for ref in (*d.rule.explicit, *([d.rule.default] if d.rule.default else [])):
                if ref.format != "parquet":
                    raise unsupported(processors[d.index], f"writing a {ref.format} topic")

    # -- one micro-batch --------------------------------------------------------------
    def run(self, inputs: dict[str, Rows]) -> bool:
        """Run one micro-batch over ``inputs`` (topic name -> its buffered records); False
        when there is no record (no micro-batch runs, as on Spark)."""
        if not any(inputs.values()):
            return False
        started = time.perf_counter()
        memo: dict[int, pa.Table] = {}
        observed: dict[str, Any] = {}

        def table_of(stage: st.Stage) -> pa.Table:
            key = id(stage)
            if key not in memo:
                memo[key] = self._stage(stage, table_of, inputs, observed)
            return memo[key]

        with self._state_dir(), self._wall_clock(), _translated(self.application_id):
            for stage in self.output.stages():  # inputs first: no deep recursion
                table_of(stage)
            written = self._write(table_of)
        sides = self._sides(table_of)
        ms = int((time.perf_counter() - started) * 1000)
        observed[OBSERVED_METRICS] = {"records": written, "side": sides}
        self._batches.add(
            {
                "runId": "local",
                "batchId": self._batch_id,
                "numInputRows": sum(len(r) for r in inputs.values()),
                "durationMs": {"addBatch": ms, "triggerExecution": ms},
                "observedMetrics": observed,
            }
        )
        self._batch_id += 1
        return True

    @contextmanager
    def _wall_clock(self) -> Iterator[None]:
        """The engine's clock as the processors' wall clock, for the batch."""
        if self.clock is None:
            yield
            return
        from kspark_server.operators.processor import wall_clock

        with wall_clock(self.clock):
            yield

    @contextmanager
    def _state_dir(self) -> Iterator[None]:
        """The operators' local stores in the engine's folder (an executor's local dir)."""
        old = os.environ.get("KSPARK_LOCAL_STATE_DIR")
        os.environ["KSPARK_LOCAL_STATE_DIR"] = self.state_dir
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("KSPARK_LOCAL_STATE_DIR", None)
            else:
                os.environ["KSPARK_LOCAL_STATE_DIR"] = old

    def _stage(
        self,
        stage: st.Stage,
        table_of: Callable[[st.Stage], pa.Table],
        inputs: dict[str, Rows],
        observed: dict[str, Any],
    ) -> pa.Table:
        if isinstance(stage, st.Read):
            table = self._read(stage, inputs.get(stage.topic.name) or [])
            name = INPUT_METRICS_PREFIX + stage.processor + (f"#{stage.part}" if stage.part else "")
            observed[name] = {"records": table.num_rows}
            return table
        if isinstance(stage, st.Chain):
            from kspark_server.chain import make_chain

            fn = self._chains.get(id(stage))
            if fn is None:
                fn = self._chains[id(stage)] = make_chain(stage.spec)
            return self._map(fn, table_of(stage.input), stage.spec.output_schema)
        if isinstance(stage, st.IdStage | st.JoinKeyStage | st.TopicNameStage):
            return self._map(
                self._stateless(stage), table_of(stage.input), stage.spec.output_schema
            )
        if isinstance(stage, st.Union):
            parts = [table_of(p) for p in stage.parts]
            first = parts[0]
            return pa.concat_tables(
                [first, *(p.select(first.column_names).cast(first.schema) for p in parts[1:])]
            )
        if isinstance(stage, st.Shuffle):
            # records keep their order; only a stateful operator's tasks see partitions
            return table_of(stage.input)
        if isinstance(stage, st.Cogroup):
            return cogrouped([table_of(p) for p in stage.parts])
        if isinstance(stage, st.Stateful):
            return self._stateful(stage, table_of)
        raise unsupported(type(stage).__name__, "this stage")

    def _stateless(
        self, stage: st.IdStage | st.JoinKeyStage | st.TopicNameStage
    ) -> Callable[[Any], Iterator[pa.RecordBatch]]:
        """The ``mapInArrow`` function of a stage that adds a column, built once (the
        topic name stage keeps which names are bound)."""
        fn = self._chains.get(id(stage))
        if fn is None:
            if isinstance(stage, st.IdStage):
                from kspark_server.chain import make_id_stage

                fn = make_id_stage(stage.spec)
            elif isinstance(stage, st.JoinKeyStage):
                from kspark_server.joinkeys import make_join_key_stage

                fn = make_join_key_stage(stage.spec)
            else:
                from kspark_server.topicnames import make_topic_name_stage

                fn = make_topic_name_stage(stage.spec)
            self._chains[id(stage)] = fn
        return fn

    @staticmethod
    def _map(
        fn: Callable[[Any], Iterator[pa.RecordBatch]], table: pa.Table, schema_json: str
    ) -> pa.Table:
        """A ``mapInArrow`` function over ``table``; Spark calls it with the rows' batches."""
        schema = _arrow_schema(schema_json)
        if not table.num_rows:
            return _empty(schema)
        out = [b for b in fn(iter(table.combine_chunks().to_batches())) if b.num_rows]
        if not out:
            return _empty(schema)
        return pa.Table.from_batches([b.select(schema.names).cast(schema) for b in out], schema)

    def _read(self, stage: st.Read, rows: Rows) -> pa.Table:
        """A source's records of the batch, in the envelope's form (what the Spark
        source makes of the driver's files: topic, offsets and ``ks_sub`` filled in)."""
        schema = _arrow_schema(
            env.envelope_json(stage.key_type.spark_json(), stage.value_type.spark_json())
        )
        records = []
        for r in rows:
            record = {
                "key": r["key"],
                "value": r["value"],
                "timestamp": r["timestamp"],
                "headers": r["headers"],
                "topic": stage.topic.name,
                "partition": r["partition"],
                "offset": r["offset"],
                "ks_seq": r["ks_seq"],
                "ks_sub": 0,
                "ks_side": None,
            }
            ts = record["timestamp"]
            if ts is None or ts < 0:
                self._invalid_timestamp(stage, record)
            records.append(record)
        return pa.Table.from_pylist(records, schema=schema)

    def _invalid_timestamp(self, stage: st.Read, record: dict[str, Any]) -> None:
        """A record whose timestamp is null or negative, by ``timestamp_policy``, as the
        source's checks on Spark (``kspark.compiler.lowering.timestamps``) treat it."""
        policy = stage.timestamp_policy
        if policy == "use-partition-time":  # the next stateful operator fills it in
            record["timestamp"] = None
            return
        ts, p, offset = record["timestamp"], record["partition"], record["offset"]
        if policy == "fail":
            from kspark.runtime.failures import translate_failure

            raise translate_failure(
                RuntimeError(
                    f"[KSPARK_INVALID_TIMESTAMP] {stage.processor}: a record of topic "
                    f"{stage.topic.name!r} has an invalid timestamp "
                    f"({'null' if ts is None else ts}) at partition {p} offset {offset}. Set "
                    "StreamsConfig(timestamp_policy='skip') to drop such records, or "
                    "'use-partition-time' to give them their partition's time."
                ),
                self.application_id,
            )
        side: dict[str, Any] = {
            "kind": SideKind.DROPPED.value,
            "processor": stage.processor,
            "task": f"{stage.subtopology}_{p}",
            "count": 1,
            "reason": "invalid-timestamp",
            "chunk": f"{stage.processor}:ts:{p}:{offset}",
        }
        if stage.dead_letter_dropped:
            side.update(
                kind=SideKind.DLQ.value,
                dlq_key=json_text(record["key"], stage.key_type),
                dlq_value=json_text(record["value"], stage.value_type),
                exception_class="kspark_server.handling.DroppedRecord",
                exception_message=(
                    f"{stage.processor} dropped the record: its timestamp is null or "
                    "negative (StreamsConfig.timestamp_policy='skip')"
                ),
                stack_trace="",
                dlq_headers=[
                    {
                        "key": h["key"],
                        "value": None
                        if h["value"] is None
                        else base64.b64encode(h["value"]).decode(),
                    }
                    for h in record["headers"] or []
                ],
                src_topic=record["topic"],
                src_partition=p,
                src_offset=offset,
                src_timestamp=ts,
            )
        record.update(key=None, value=None, ks_side=json.dumps(side))

    # -- stateful operators -------------------------------------------------------------
    def _stateful(self, stage: st.Stateful, table_of: Callable[[st.Stage], pa.Table]) -> pa.Table:
        spec = stage.spec
        out_schema = _arrow_schema(spec.output_schema)
        table = self._joined_input(stage, table_of)
        if not table.num_rows:
            return _empty(out_schema)
        if spec.packed.value:
            table = packed_column(table, "value", stage.stream.value_type.spark_json())
        if spec.packed.tvalue and stage.table is not None:
            table = packed_column(table, "ks_tvalue", stage.table.value_type.spark_json())
        if stage.task_column == "key":
            column_type = stage.stream.key_type.spark_json()
        elif stage.task_column == "ks_gkey":
            assert stage.table is not None  # a global table's join
            column_type = stage.table.key_type.spark_json()
        else:
            column_type = "string"
        hasher = placement.spark_hasher(column_type)
        n = stage.num_partitions
        keys = placement.task_keys(n)
        hashes = [hasher(v, 42) for v in table.column(stage.task_column).to_pylist()]
        table = table.append_column("ks_hash", pa.array(hashes, pa.int32()))
        table = table.append_column(
            "ks_task", pa.array([keys[placement.pmod(h, n)] for h in hashes], pa.int32())
        )
        if stage.broadcast_table:
            table = broadcast(table, keys)
        results: list[pa.Table] = []
        self._grouped(stage, table, results)
        if not results:
            return _empty(out_schema)
        out = pa.concat_tables(results, promote_options="permissive")
        if spec.packed.out:
            value_type = out_schema.field("value").type
            values = [
                None if v is None else to_arrow_value(json.loads(v), value_type)
                for v in out.column("value").to_pylist()
            ]
            out = out.set_column(
                out.column_names.index("value"), "value", pa.array(values, value_type)
            )
        return out.select(out_schema.names).cast(out_schema)

    def _grouped(self, stage: st.Stateful, table: pa.Table, results: list[pa.Table]) -> None:
        """Each task's records, straight, to the operator, as ``applyInPandasWithState``
        hands them: its group state kept here (Spark's state store) and its files under
        the engine's checkpoint folder (:mod:`kspark_server.taskfiles`)."""
        from kspark_server.operators.grouped import GroupedOperator, frame_table, output_struct

        spec = stage.spec
        fn = GroupedOperator(spec, "", "", self._grouped_root)
        # the rows as Spark reads the operator's frames
        declared = output_struct(transport.operator_schema(spec.output_schema, spec.packed.out))
        tasks = table.column("ks_task").to_pylist()
        for task_key in sorted(set(tasks)):
            part = table.filter(pa.array([t == task_key for t in tasks]))
            state = GroupState(self.durable.setdefault((id(stage), int(task_key)), {}))
            frames = [f for f in fn((task_key,), iter([part]), state) if len(f)]
            if frames:
                results.append(frame_table(frames, declared))

    @staticmethod
    def _joined_input(stage: st.Stateful, table_of: Callable[[st.Stage], pa.Table]) -> pa.Table:
        """The operator's input: its stream, or for a join the stream's records
        (``ks_jside`` 0) and the second input's (1, its value in ``ks_tvalue``)."""
        stream = table_of(stage.stream)
        if stage.table is None:
            return stream
        second = table_of(stage.table)
        names = [name for name, _ in env.ENVELOPE]
        tvalue_t = second.schema.field("value").type
        svalue_t = stream.schema.field("value").type
        left = stream.select(names)
        left = left.append_column("ks_tvalue", pa.nulls(left.num_rows, tvalue_t))
        left = left.append_column("ks_jside", pa.array([0] * left.num_rows, pa.int32()))
        right = second.select(names)
        right = right.set_column(1, "value", pa.nulls(right.num_rows, svalue_t))
        right = right.append_column("ks_tvalue", second.column("value"))
        right = right.append_column("ks_jside", pa.array([1] * right.num_rows, pa.int32()))
        if stage.task_column == "ks_gkey" or stage.broadcast_table:
            # a global table's join, a processor's global store: the stream's records
            # carry their table key (none for a store), the table's updates are keyed by
            # it and carry no stream key (as on Spark)
            gkey = (
                stream.column("ks_gkey")
                if stage.task_column == "ks_gkey"
                else pa.nulls(left.num_rows, second.schema.field("key").type)
            )
            left = left.append_column("ks_gkey", gkey)
            right = right.append_column("ks_gkey", second.column("key"))
            key_t = left.schema.field("key").type
            right = right.set_column(0, "key", pa.nulls(right.num_rows, key_t))
        return pa.concat_tables([left, right.cast(left.schema)])

    # -- the writer -----------------------------------------------------------------------
    def _write(self, table_of: Callable[[st.Stage], pa.Table]) -> int:
        """The sinks' records of the batch into their topics; the number of records."""
        spec = self.output.writer_spec
        by_topic: dict[tuple[str, ...], tuple[str, list[dict[str, Any]]]] = {}
        total = 0
        for part, sink in zip(self.output.sinks, spec.sinks, strict=True):
            rows = self._sink_rows(table_of(part.stage), part, sink.num_partitions)
            total += len(rows)
            by_topic.setdefault(sink.topic.destination, (sink.topic.name, []))[1].extend(rows)
        for dpart, d in zip(self.output.dynamic, spec.dynamic, strict=True):
            # each record into the topic it names, as the writer routes it
            # (kspark_server.sinks._destinations); an unbound name was the topic name
            # stage's handler's
            rows = self._sink_rows(table_of(dpart.stage), dpart, d.num_partitions, with_topic=True)
            for r in rows:
                ref = d.rule.resolve(r.pop("topic"))
                if ref is None:
                    continue
                total += 1
                by_topic.setdefault(ref.destination, (ref.name, []))[1].append(r)
        for name, rows in by_topic.values():
            rows.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
            for r in rows:
                del r["ks_seq"], r["ks_sub"]
            self.topics.setdefault(name, []).append(rows)
        if spec.dlq is not None:
            dead = self._dead_letters(table_of)
            self.topics.setdefault(spec.dlq.name, []).append(dead)
        return total

    @staticmethod
    def _sink_rows(
        table: pa.Table,
        part: st.SinkPart | st.DynamicSinkPart,
        n: int,
        with_topic: bool = False,
    ) -> list[dict[str, Any]]:
        """A sink's records of the batch, each with its output partition (and, for a sink
        whose records name their topics, its topic)."""
        records = table.filter(pc.is_null(table.column("ks_side")))
        hasher = placement.spark_hasher(part.stage.key_type.spark_json())
        columns = ["key", "value", "timestamp", "headers", "ks_seq", "ks_sub"]
        rows = records.select([*columns, "topic"] if with_topic else columns).to_pylist()
        out = []
        for r in rows:
            row = {
                "key": r["key"],
                "value": r["value"],
                "timestamp": r["timestamp"],
                "headers": r["headers"],
                "partition": placement.pmod(hasher(r["key"], 42), n),
                "ks_seq": r["ks_seq"],
                "ks_sub": r["ks_sub"],
            }
            if with_topic:
                row["topic"] = r["topic"]
            out.append(row)
        return out

    def _side_texts(self, table_of: Callable[[st.Stage], pa.Table]) -> list[str]:
        texts: list[str] = []
        for stage in self.output.roots():
            col = table_of(stage).column("ks_side")
            texts.extend(t for t in col.to_pylist() if t is not None)
        return texts

    def _dead_letters(self, table_of: Callable[[st.Stage], pa.Table]) -> Rows:
        """The batch's dead letters as the writer writes them: one per side row's
        identity, in source order."""
        seen: dict[tuple[Any, ...], dict[str, Any]] = {}
        for text in self._side_texts(table_of):
            s = _side_of(text)
            if s.get("kind") != SideKind.DLQ.value:
                continue
            seen.setdefault(tuple(s.get(k) for k in SIDE_IDENTITY), s)
        rows = []
        for s in seen.values():
            headers = [
                {"key": h.get("key"), "value": b64(h.get("value"))}
                for h in s.get("dlq_headers") or []
            ]
            rows.append(
                {
                    "key": s.get("dlq_key"),
                    "value": s.get("dlq_value"),
                    "timestamp": s.get("src_timestamp"),
                    "headers": headers,
                    "exception_class": s.get("exception_class"),
                    "exception_message": s.get("exception_message"),
                    "stack_trace": s.get("stack_trace"),
                    "topic": s.get("src_topic"),
                    "partition": s.get("src_partition"),
                    "offset": s.get("src_offset"),
                    "processor_node_id": s.get("processor"),
                    "task_id": s.get("task"),
                }
            )
        rows.sort(key=lambda r: r["offset"] if r["offset"] is not None else -1)
        return rows

    def _sides(self, table_of: Callable[[st.Stage], pa.Table]) -> list[dict[str, Any]]:
        """The batch's side rows as the writer's observation collects them (a set)."""
        fields = ("kind", "processor", "task", "count", "chunk", "reason")
        found: dict[tuple[Any, ...], dict[str, Any]] = {}
        for text in self._side_texts(table_of):
            s = _side_of(text)
            row = {f: s.get(f) for f in fields}
            found.setdefault(tuple(row.values()), row)
        return list(found.values())

    # -- what a test reads ------------------------------------------------------------------
    def metrics(self) -> Metrics:
        return Metrics.of(self._batches.figures())

    def task_states(self, stage: st.Stateful) -> dict[int, Any]:
        """Each task's state of ``stage``, read back from its durable base and log (as an
        interactive query reads the checkpoint)."""
        spec = stage.spec
        out: dict[int, Any] = {}
        for (sid, task_key), store in self.durable.items():
            if sid != id(stage):
                continue
            # the group state names the committed version of the task's files
            committed = store.get("group")
            if committed is None:
                continue
            task = placement.task_of(task_key)
            files = TaskFiles(self._grouped_root, spec.store, task, committed, create=False)
            out[task] = taskstate.materialize(
                spec.kind,
                spec.versioned,
                list(files.chunks()),
                [blob for (blob,) in files.log.get()],
            )
        return out

    def restart(self) -> None:
        """Start over as a new run on new executors: new operators, and empty local
        stores that they rebuild from the durable state, as after a restart on Spark."""
        self.close()
        self._restarts += 1
        self.state_dir = f"{self._state_root}-{self._restarts}"

    def close(self) -> None:
        """Close the local stores the operators opened."""
        from kspark_server import localstore

        for path, store in list(localstore._registry().items()):
            if path.startswith(self.state_dir):
                store.close()
                localstore._registry().pop(path, None)


@contextmanager
def _translated(application_id: str) -> Iterator[None]:
    """A failure that kspark raised in an operator, as the error the Spark path raises
    for it (:func:`kspark.runtime.failures.translate_failure`)."""
    from kspark_server import handling
    from kspark_server.operators.suppress import SuppressionBufferFull

    try:
        yield
    except handling.ProcessingFailed as exc:
        raise ProcessingError(str(exc), application_id=application_id) from exc
    except handling.DeserializationFailed as exc:
        raise DeserializationError(str(exc), application_id=application_id) from exc
    except handling.HandlerFailed as exc:
        raise HandlerError(str(exc), application_id=application_id) from exc
    except SuppressionBufferFull as exc:
        raise SuppressionBufferFullError(str(exc), application_id=application_id) from exc
    except (EngineNotSupportedError, StreamsAppError):
        raise
