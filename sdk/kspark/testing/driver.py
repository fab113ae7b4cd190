"""``TopologyTestDriver``: Kafka Streams' test driver, in process or on a Spark server.

Input topics buffer what a test pipes; :meth:`TopologyTestDriver.process` runs exactly one
micro-batch over it, so a test controls micro-batch boundaries. Reading an output topic
processes pending input first.

With ``engine="local"`` the micro-batch runs in this process (:mod:`kspark.testing.local`).
With ``engine="spark"`` the driver writes the input as one file per topic and runs the
micro-batch on a Spark server that shares the client's file system: the embedded server,
or one on the same machine.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload

import attrs

from kspark.bindings import bind_dynamic_sinks, topic_names
from kspark.config import StreamsConfig
from kspark.errors import InvalidArgumentError, StoreError
from kspark.plan.nodes import (
    PATTERN_OPTION,
    DynamicSink,
    Node,
    Print,
    Source,
    TableSource,
    Topic,
    TopicSpec,
)
from kspark.plan.topology import Topology, _new_parents
from kspark.plan.types import DYNAMIC, Dynamic, TypeDesc, describe_type
from kspark.runtime import filesink
from kspark.runtime.app import StreamsApp
from kspark.runtime.checkpoints import Generation
from kspark.runtime.metrics import Metrics
from kspark.testing.local import LocalEngine, unsupported
from kspark.testing.topics import (
    TestInputTopic,
    TestOutputTopic,
    TestRecord,
)
from kspark_server.spec import ProcessorSpec

__all__ = [
    "DEFAULT_ENGINE",
    "Engine",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopologyTestDriver",
]

#: Where the driver runs a topology: in this process, or on a Spark server.
Engine = Literal["local", "spark"]

#: The engine of a driver that names none and is given no session (a session is a Spark
#: server's: a driver given one runs on it).
DEFAULT_ENGINE: Engine = "local"

K = TypeVar("K")
V = TypeVar("V")


def _sources_by_topic(topology: Topology) -> dict[str, Source | TableSource]:
    """The topology's sources by the names of the topics they read (the first source of
    a name), patterns left out."""
    out: dict[str, Source | TableSource] = {}
    for s in topology.sources():
        if isinstance(s, Source) and s.pattern:
            continue
        names = [n for n, _ in s.topic_parts()] if isinstance(s, Source) else [s.topic_name]
        for name in names:
            out.setdefault(name, s)
    return out


def _printing_to(topology: Topology, folder: str) -> Topology:
    """``topology`` whose ``print(Printed.to_sysout())`` processors append their lines to
    files in ``folder`` (one per processor) instead of the workers' standard output, which
    the test cannot see; the driver echoes them (:meth:`TopologyTestDriver._echo_printed`)."""

    def remap(node: Node, new: Callable[[Node], Node]) -> Node:
        changes = _new_parents(node, new)
        if isinstance(node, Print) and node.file_path is None:
            changes["file_path"] = os.path.join(folder, f"{node.name}.txt")
        return attrs.evolve(node, **changes)

    return topology.map_nodes(remap)


def _type(tp: Any) -> TypeDesc:
    return DYNAMIC if tp is None else describe_type(tp)


def _written(have: TypeDesc | None, schema: TypeDesc | None) -> TypeDesc:
    """The type a sink writes: its records', or, for dynamic ones, its Topic's schema."""
    have = have or DYNAMIC
    return schema if isinstance(have, Dynamic) and schema is not None else have


class TopologyTestDriver:
    """Runs a topology one micro-batch per :meth:`process`, in this process or on Spark.

    ``engine="local"`` runs the compiled stages in the test's own process with
    ``kspark_server``'s operator code (:mod:`kspark.testing.local`): no Spark server, a
    few milliseconds per step. ``engine="spark"`` runs each micro-batch on a real Spark
    server, for what only Spark runs (``filter_expr``, Kafka topics, a rescale): the local
    engine refuses such a topology with :class:`~kspark.errors.EngineNotSupportedError`,
    never a different answer. Without ``engine``: ``"spark"`` when a ``session`` is given,
    else :data:`DEFAULT_ENGINE` (in this process).

    Topics are matched by name: each source and sink of the topology, and the dead-letter
    topic, becomes a topic of the driver (a Parquet folder in its working directory, on
    Spark).

    Examples
    --------
    >>> with TopologyTestDriver(topology, config, engine="local") as driver:  # doctest: +SKIP
    ...     src = driver.create_input_topic("in", key_type=str, value_type=int)
    ...     out = driver.create_output_topic("out", key_type=str, value_type=int)
    ...     src.pipe_input("a", 1, timestamp=0)
    ...     out.read_key_values()
    [('a', 1)]
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig | None = None,
        session: Any = None,
        *,
        engine: Engine | None = None,
    ) -> None:
        engine = engine or ("spark" if session is not None else DEFAULT_ENGINE)
        if engine not in ("local", "spark"):
            raise InvalidArgumentError(f'engine must be "local" or "spark", not {engine!r}')
        if engine == "local" and session is not None:
            raise InvalidArgumentError(
                'a session is for engine="spark"; the local engine runs in this process'
            )
        #: ``local`` (in this process) or ``spark``
        self.engine: Engine = engine
        self._local: LocalEngine | None = None
        #: the in-process engine's wall clock (ms): now, moved only by
        #: :meth:`advance_wall_clock_time`
        self._wall_clock_ms = int(time.time() * 1000)
        self._workdir = tempfile.mkdtemp(prefix="kspark-ttd-")
        self._seq = 0
        self._inputs: dict[str, TestInputTopic[Any, Any]] = {}
        base = config or StreamsConfig(application_id=f"ttd-{uuid.uuid4().hex[:8]}")
        self.original = topology
        # every name, bound or not, becomes the driver's own folder; the config's bindings
        # are for deployments, so they are dropped
        topic_names(topology)  # refuses a name the topology binds to two Topics
        # ... but a binding's schema (key_type=, value_type=) is the topology's business
        # too: the driver's folders keep it
        self._schemas = base.topic_bindings
        # a name that a record picks (to(topic_extractor)) is the driver's folder too
        self.topology = bind_dynamic_sinks(
            _printing_to(topology.with_topics(self._rewire), self._sysout_dir()),
            (),
            attrs.evolve(
                Topic.parquet("*", os.path.join(self._workdir, "topics")),
                options=(("kspark.ordered", "true"),),
            ),
        )
        self._printed: dict[str, int] = {}
        dlq = base.dead_letter_queue_topic
        self.config = base.with_(
            checkpoint_dir=os.path.join(self._workdir, "checkpoint"),
            # as Kafka Streams' driver: the local stores live and die with the driver, so
            # no test leaves stores behind under $KSPARK_HOME
            state_dir=base.state_dir or os.path.join(self._workdir, "local-state"),
            dead_letter_queue_topic=self._rewire(dlq.name, dlq, "sink")
            if dlq is not None
            else None,
            topics=(),
            bootstrap_servers=None,
            data_dir=None,
            # Spark's file sink keeps each micro-batch's own log file (no compaction), so
            # that output topics read back batch by batch (filesink.logged_batches)
            spark_conf=(
                *base.spark_conf,
                ("spark.sql.streaming.fileSink.log.compactInterval", str(2**31 - 1)),
            ),
        )
        self.app = StreamsApp(self.topology, self.config, session=session)
        #: whether a micro-batch ran: the plan is fixed from then on
        self._started = False

    def _rewire(self, name: str, topic: TopicSpec | None, role: str) -> TopicSpec:
        if role == "pattern":  # every topic folder of the driver whose name matches
            return attrs.evolve(
                Topic.parquet(name, os.path.join(self._workdir, "topics")),
                options=((PATTERN_OPTION, "true"),),
            )
        opts = (("kspark.ordered", "true"),) if role == "sink" else ()
        schema = topic or self._schemas.get(name)
        return attrs.evolve(
            Topic.parquet(name, self._topic_path(name)),
            options=opts,
            key_type=schema.key_type if schema is not None else None,
            value_type=schema.value_type if schema is not None else None,
        )

    def _sysout_dir(self) -> str:
        return os.path.join(self._workdir, "sysout")

    def _echo_printed(self) -> None:
        """Write to this process's ``sys.stdout`` the lines that ``print(Printed.to_sysout())``
        printed since the last micro-batch (the workers append them to the driver's files,
        :func:`_printing_to`)."""
        folder = self._sysout_dir()
        if not os.path.isdir(folder):
            return
        for f in sorted(os.listdir(folder)):
            path = os.path.join(folder, f)
            start = self._printed.get(f, 0)
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read()
            # only whole lines: a worker may be writing the next one
            whole = data[: data.rfind(b"\n") + 1]
            self._printed[f] = start + len(whole)
            if whole:
                sys.stdout.write(whole.decode("utf-8", errors="replace"))
        sys.stdout.flush()

    def _topic_path(self, name: str) -> str:
        return os.path.join(self._workdir, "topics", name)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @overload
    def create_input_topic(
        self, name: str, *, key_type: type[K], value_type: type[V]
    ) -> TestInputTopic[K, V]: ...
    @overload
    def create_input_topic(
        self, name: str, *, key_type: type[K], value_type: None = None
    ) -> TestInputTopic[K, Any]: ...
    @overload
    def create_input_topic(
        self, name: str, *, key_type: None = None, value_type: type[V]
    ) -> TestInputTopic[Any, V]: ...
    @overload
    def create_input_topic(
        self, name: str, *, key_type: None = None, value_type: None = None
    ) -> TestInputTopic[Any, Any]: ...
    def create_input_topic(
        self, name: str, *, key_type: Any = None, value_type: Any = None
    ) -> TestInputTopic[Any, Any]:
        """A handle to pipe records into topic ``name``.

        ``key_type`` and ``value_type`` default to the types the topology reads the topic
        with (dynamic where it declares none: any JSON-compatible value).
        """
        sources = _sources_by_topic(self.topology)
        if name not in sources:
            patterns = [s for s in self.topology.sources() if isinstance(s, Source) and s.pattern]
            matching = [s for s in patterns if re.fullmatch(s.topic_name, name)]
            if not matching:
                raise InvalidArgumentError(
                    f"topic {name!r} is not a source of the topology; sources: "
                    f"{sorted(sources)}, patterns: {[s.topic_name for s in patterns]}"
                )
            sources[name] = matching[0]
        source = sources[name]
        key = _type(key_type) if key_type is not None else source.key_type or DYNAMIC
        value = _type(value_type) if value_type is not None else source.value_type or DYNAMIC
        stored = (source.key_type or DYNAMIC, source.value_type or DYNAMIC)
        topic: TestInputTopic[Any, Any] = TestInputTopic(self, name, key, value, stored)
        self._inputs[name] = topic
        return topic

    @overload
    def create_output_topic(
        self, name: str, *, key_type: type[K], value_type: type[V]
    ) -> TestOutputTopic[K, V]: ...
    @overload
    def create_output_topic(
        self, name: str, *, key_type: type[K], value_type: None = None
    ) -> TestOutputTopic[K, Any]: ...
    @overload
    def create_output_topic(
        self, name: str, *, key_type: None = None, value_type: type[V]
    ) -> TestOutputTopic[Any, V]: ...
    @overload
    def create_output_topic(
        self, name: str, *, key_type: None = None, value_type: None = None
    ) -> TestOutputTopic[Any, Any]: ...
    def create_output_topic(
        self, name: str, *, key_type: Any = None, value_type: Any = None
    ) -> TestOutputTopic[Any, Any]:
        """A handle to read the records the topology wrote to topic ``name``.

        Records are read as ``key_type`` and ``value_type``; a dynamic key or value (one the
        topology does not declare) is converted to them, so ``value_type=Order`` reads a
        dict as an ``Order``. Without them, records are read as the topology wrote them.
        """
        # the app's bound topology: sources typed by their Topic's schema, and so what
        # keeps their types
        sinks = {s.topic_name: s for s in self.app.topology.sinks}
        dlq = self.config.dead_letter_queue_topic
        dynamic = [t for t in self.app.topology.ends if isinstance(t, DynamicSink)]
        if name not in sinks and dynamic and (dlq is None or dlq.name != name):
            # a topic that records name (to(topic_extractor)): read as its sink wrote it
            picked = dynamic[0]
            stored_kv = (picked.key_type or DYNAMIC, picked.value_type or DYNAMIC)
            key = _type(key_type) if key_type is not None else stored_kv[0]
            value = _type(value_type) if value_type is not None else stored_kv[1]
            return TestOutputTopic(self, name, key, value, stored_kv)
        if name not in sinks and (dlq is None or dlq.name != name):
            known = sorted({*sinks, *([dlq.name] if dlq is not None else [])})
            raise InvalidArgumentError(
                f"topic {name!r} is not a sink of the topology; sinks: {known}"
            )
        sink = sinks.get(name)
        stored: tuple[TypeDesc, TypeDesc] | None = None
        if sink is not None:
            # a dynamic record that the sink's Topic declares a type for is written as that
            schema = sink.topic or Topic.parquet(name, "/")
            stored = (
                _written(sink.key_type, schema.key_type),
                _written(sink.value_type, schema.value_type),
            )
        if stored is not None and not self._started and (key_type, value_type) != (None, None):
            # the sink itself converts its dynamic records to the declared types, as a
            # typed sink would: one that does not convert goes to the production handler
            # under the sink's name, not to an error when it is read
            declared = (
                _type(key_type) if key_type is not None else None,
                _type(value_type) if value_type is not None else None,
            )
            self.app.sink_types[name] = declared
            self.app._output = None
            stored = tuple(  # type: ignore[assignment]
                d if isinstance(s, Dynamic) and d is not None else s
                for s, d in zip(stored, declared, strict=True)
            )
        key = _type(key_type) if key_type is not None else (stored or (DYNAMIC, DYNAMIC))[0]
        value = _type(value_type) if value_type is not None else (stored or (DYNAMIC, DYNAMIC))[1]
        return TestOutputTopic(self, name, key, value, stored)

    def dead_letter_topic(self) -> TestOutputTopic[str, str]:
        """The dead-letter topic (keys and values are the raw records as JSON text)."""
        dlq = self.config.dead_letter_queue_topic
        if dlq is None:
            raise InvalidArgumentError("the config has no dead_letter_queue_topic")
        return TestOutputTopic(self, dlq.name, describe_type(str), describe_type(str))

    def _pending(self) -> bool:
        return any(t._pending for t in self._inputs.values())

    def _process_pending(self) -> None:
        if self._pending():
            self.process()

    def process(self) -> None:
        """Run one micro-batch over everything piped since the last one."""
        if self.engine == "local":
            engine = self._local_engine()
            inputs = {name: topic._take() for name, topic in self._inputs.items()}
            self._started = True
            engine.run(inputs)
            self._echo_printed()
            return
        for topic in self._inputs.values():
            topic._flush()
        os.makedirs(os.path.join(self._workdir, "topics"), exist_ok=True)
        for name in _sources_by_topic(self.topology):
            os.makedirs(self._topic_path(name), exist_ok=True)
        if not self._started:
            self._choose_file_sink()
        self._started = True
        self.app.run_until_caught_up()
        self._echo_printed()

    def _choose_file_sink(self) -> None:
        """Spark's file sink for the driver's output topic where the topology allows it,
        with state too: the driver's topics are its own, and :meth:`rescale` turns them
        into batch folders first (kspark.runtime.filesink). It saves the ``foreachBatch``
        writer's Python process at every :meth:`process`."""
        if self.config.file_sink != "auto":
            return
        if filesink.spark_sink_blocker(self.app.compiled(), Generation(checkpoint="")) is None:
            self.config = self.app.config = self.config.with_(file_sink="spark")

    def _to_batch_folders(self) -> None:
        """Move the driver's output topics from Spark's file sink layout to batch folders,
        batch by batch (the rescaled app writes batch folders: Spark's log cannot go on
        across a rescale)."""
        for topic in filesink.file_topics(self.app.compiled()):
            assert topic.path is not None
            logged = filesink.logged_batches(topic.path)
            for n, files in enumerate(logged or []):
                folder = os.path.join(topic.path, f"batch_id={n}")
                os.makedirs(folder, exist_ok=True)
                for i, f in enumerate(files):
                    os.replace(f, os.path.join(folder, f"part-{i:05d}.parquet"))
            shutil.rmtree(os.path.join(topic.path, filesink.SPARK_LOG), ignore_errors=True)
        self.config = self.app.config = self.config.with_(file_sink="auto")

    def _local_engine(self) -> LocalEngine:
        """The in-process engine, built at the first micro-batch (the output topics'
        declared types are known then, as for the Spark query's plan)."""
        if self._local is None:
            self._local = LocalEngine(
                self.app.uncut(),
                self.config.application_id,
                os.path.join(self._workdir, "local-state"),
                clock=lambda: self._wall_clock_ms,
            )
        return self._local

    def metrics(self) -> Metrics:
        if self.engine == "local":
            self._process_pending()
            return self._local_engine().metrics()
        return self.app.metrics()

    def store(self, name: str) -> Any:
        """The state store ``name`` after the last :meth:`process` (see
        :meth:`kspark.StreamsApp.store`)."""
        self._process_pending()
        if self.engine == "local":
            return self._local_store(name)
        return self.app.store(name)

    def _local_store(self, name: str) -> Any:
        """Store ``name``'s view over the in-process engine's task states, read back from
        their durable form (the view :meth:`kspark.StreamsApp.store` gives)."""
        from kspark.runtime.stores import processors, sources, tables

        # the stages the engine runs (the app's own plan may have been rebuilt since)
        engine = self._local_engine()
        output = engine.output
        stage = tables._find_stage(output, name)
        if isinstance(stage.spec, ProcessorSpec):
            # a processor's stores are its task state's entries, keyed (store, key)
            (store,) = [d for d in stage.spec.stores if d.name == name]
            tasks = {t: {"table": s["entries"]} for t, s in engine.task_states(stage).items()}
            return processors._processor_view(name, sources._MemorySource(tasks, False), store)
        spec = tables._table_spec(output, name, "answer interactive queries")
        source = sources._MemorySource(engine.task_states(stage), spec.versioned)
        return tables._view(name, source, spec)

    def get_key_value_store(self, name: str) -> Any:
        """Key-value store ``name`` (a table's, a key's aggregation, a processor's): ``get(key)``,
        iteration, ``approximate_num_entries()``, as Kafka Streams'
        ``getKeyValueStore``."""
        from kspark.runtime.stores import (
            ReadOnlyAggregateStore,
            ReadOnlyJoinedStore,
            ReadOnlyKeyValueStore,
            ReadOnlyProcessorStore,
        )

        return self._typed_store(
            name,
            (
                ReadOnlyKeyValueStore,
                ReadOnlyAggregateStore,
                ReadOnlyJoinedStore,
                ReadOnlyProcessorStore,
            ),
            "a key-value store",
        )

    def get_versioned_key_value_store(self, name: str) -> Any:
        """Versioned store ``name`` (``Materialized.as_versioned``): ``get(key, as_of)``
        and ``versions(key, ...)``, as Kafka Streams' ``getVersionedKeyValueStore``."""
        from kspark.runtime.stores import ReadOnlyProcessorVersionedStore, ReadOnlyVersionedStore

        return self._typed_store(
            name, (ReadOnlyVersionedStore, ReadOnlyProcessorVersionedStore), "a versioned store"
        )

    def get_window_store(self, name: str) -> Any:
        """Window store ``name`` (a windowed aggregation's): ``fetch(key, time_from,
        time_to)``, as Kafka Streams' ``getWindowStore``."""
        from kspark.runtime.stores import ReadOnlyProcessorWindowStore, ReadOnlyWindowStore

        return self._typed_store(
            name, (ReadOnlyWindowStore, ReadOnlyProcessorWindowStore), "a window store"
        )

    def get_session_store(self, name: str) -> Any:
        """Session store ``name`` (a session-windowed aggregation's): ``fetch(key)``,
        ``find_sessions(key, earliest_end, latest_start)`` and ``fetch_session(key,
        start, end)``, as Kafka Streams' ``getSessionStore``
        (:class:`kspark.runtime.stores.ReadOnlySessionStore`)."""
        from kspark.runtime.stores import ReadOnlySessionStore

        return self._typed_store(name, (ReadOnlySessionStore,), "a session store")

    def _typed_store(self, name: str, kinds: tuple[type, ...], what: str) -> Any:
        found = self.store(name)
        if not isinstance(found, kinds):
            raise StoreError(
                f"store {name!r} is not {what} but a {type(found).__name__}; read it with "
                "driver.store(name)",
                store=name,
            )
        return found

    def produced_topic_names(self) -> set[str]:
        """The topics that micro-batches have written records into, the dead-letter topic
        included (Kafka Streams' ``producedTopicNames``)."""
        self._process_pending()
        names = {p.topic.name for p in self.app.uncut().sinks}
        dlq = self.config.dead_letter_queue_topic
        if dlq is not None:
            names.add(dlq.name)
        if any(isinstance(t, DynamicSink) for t in self.app.topology.ends):
            # the topics that records named (to(topic_extractor)): those the driver holds
            # that no source reads
            folder = os.path.join(self._workdir, "topics")
            if self._local is not None:
                held = set(self._local.topics)
            else:
                held = set(os.listdir(folder)) if os.path.isdir(folder) else set()
            names |= held - set(_sources_by_topic(self.topology))
        return {
            n
            for n in names
            if TestOutputTopic(self, n, describe_type(str), describe_type(str))._all_rows()
        }

    def advance_wall_clock_time(self, duration: timedelta | int) -> None:
        """Move the driver's wall clock on by ``duration`` (a ``timedelta`` or ms), as
        Kafka Streams' ``advanceWallClockTime``. Pending input is processed first.

        In process, the driver's clock is the processors' wall clock: it starts at the
        driver's creation and moves only here, so that a wall-clock punctuator
        (``PunctuationType.WALL_CLOCK_TIME``) that is due fires in the next
        :meth:`process` of a task that has records (kspark checks wall-clock punctuators
        once per micro-batch of a task, after its records). On Spark, the processors read
        the executors' system clock and this clock is not theirs.
        """
        ms: Any = (
            int(duration.total_seconds() * 1000) if isinstance(duration, timedelta) else duration
        )
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise InvalidArgumentError(f"duration must be >= 0 (timedelta or ms), got {duration!r}")
        self._process_pending()
        self._wall_clock_ms += ms

    def rescale(self, partitions: int) -> Any:
        """Rescale the app's state to ``partitions`` partitions between two
        :meth:`process` calls (see :meth:`kspark.StreamsApp.rescale`); Spark only."""
        if self.engine == "local":
            raise unsupported("rescale", "moving state to another number of partitions")
        self._process_pending()
        if self.config.file_sink == "spark":
            self._to_batch_folders()
        report = self.app.rescale(partitions)
        self.config = self.app.config
        return report

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        if self.engine == "spark":
            self.app.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
