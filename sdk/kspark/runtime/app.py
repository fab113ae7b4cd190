"""``StreamsApp``: runs a topology as one Spark streaming query and reports on it."""

from __future__ import annotations

import enum
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from kspark.bindings import bind_topology
from kspark.compiler.compiler import compile_topology
from kspark.compiler.lowering import build_dataframe, writer_function
from kspark.compiler.resume import Resume
from kspark.compiler.stages import Output
from kspark.compiler.subtopologies import INTERNAL_OPTION
from kspark.config import StreamsConfig, state_store_conf
from kspark.errors import (
    AppAlreadyRunningError,
    ConfigError,
    InvalidArgumentError,
    ObsoleteCheckpointError,
    StreamsAppError,
)
from kspark.plan.topics import TopicSpec
from kspark.plan.topology import Topology
from kspark.plan.types import TypeDesc
from kspark.runtime import filesink, internal, lease, localstate, restore, shipping, workers
from kspark.runtime import regroup as rescaler
from kspark.runtime import rescale as rescaling
from kspark.runtime import standbys as standby_copies
from kspark.runtime.checkpoints import (
    Generation,
    current_generation,
    last_committed,
    tws_state,
    write_generation,
)
from kspark.runtime.display import NullProgress
from kspark.runtime.failures import translate_failure
from kspark.runtime.handles import OutputInfo
from kspark.runtime.metrics import Batches, Metrics, Totals, progress_as_dict
from kspark.runtime.progress import ProgressMode, ProgressReporter, resolve_progress, watch
from kspark.runtime.server import connect
from kspark_server.sinks import FILE_FORMATS

__all__ = ["Metrics", "RunReport", "StartPlan", "State", "StreamsApp"]


class State(enum.Enum):
    """The app's life cycle, after Kafka Streams' ``KafkaStreams.State``."""

    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"


@attrs.frozen(kw_only=True)
class RunReport:
    """What one :meth:`StreamsApp.run_until_caught_up` did."""

    batches: int
    input_records: int
    output_records: int
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.input_records / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.batches} micro-batch(es), {self.input_records:,} records in, "
            f"{self.output_records:,} out, {self.seconds:.1f}s "
            f"({self.records_per_second:,.0f} records/s)"
        )


@attrs.frozen(kw_only=True)
class StartPlan:
    """What a start of the app's query starts from, decided before the query starts
    (:meth:`StreamsApp._plan_start`)."""

    #: the checkpoint generation the query runs on
    generation: Generation
    #: where a rescaled generation's inputs and state start; None for Spark's checkpoint alone
    resume: Resume | None
    #: whether the run restores state first (the app is ``RESTORING`` until its first batch)
    restoring: bool
    #: how the sinks write: ``spark`` (Spark's file sink) or kspark's ``foreachBatch`` writer
    sink_mode: filesink.Mode


_log = logging.getLogger("kspark.app")


class StreamsApp:
    """Runs a topology on Spark, like Kafka Streams' ``KafkaStreams``.

    Parameters
    ----------
    topology
        From :meth:`kspark.StreamsBuilder.build`. Its topic names are bound here, by
        ``config`` (:func:`kspark.bindings.bind_topology`).
    config
        The app's settings, with the bindings of the topology's topic names (``topics``,
        ``bootstrap_servers``, ``data_dir``).
    session
        A Spark Connect session; None uses :func:`kspark.connect` (the embedded server).

    Raises
    ------
    UnboundTopicError
        If a topic name of the topology is bound to nothing.
    ConfigError
        If ``config.topics`` binds a name to another Topic than the topology does.

    Examples
    --------
    >>> config = StreamsConfig(application_id="payments", data_dir="/data")
    >>> app = StreamsApp(topology, config)  # doctest: +SKIP
    >>> print(app.run_until_caught_up().summary())  # doctest: +SKIP
    """

    def __init__(self, topology: Topology, config: StreamsConfig, session: Any = None) -> None:
        if not isinstance(topology, Topology):
            raise InvalidArgumentError("StreamsApp needs a Topology from StreamsBuilder.build()")
        if not isinstance(config, StreamsConfig):
            raise ConfigError("StreamsApp needs a StreamsConfig")
        #: the topology with every topic name bound (see :mod:`kspark.bindings`)
        self.topology = bind_topology(topology, config)
        self.config = config
        self._session = session
        self._query: Any = None
        self._state = State.CREATED
        self._output: Output | None = None
        #: the internal topics between the app's sub-topologies (compiled())
        self._internal: tuple[TopicSpec, ...] = ()
        #: sink topic name -> the (key, value) types the sink converts dynamic records to,
        #: as the test driver's typed output topics declare them
        self.sink_types: dict[str, tuple[TypeDesc | None, TypeDesc | None]] = {}
        self._batches = Batches()
        #: tokens of this object's runs (their leases), and those it said ended
        self._runs: list[str] = []
        self._released: set[str] = set()
        self._listeners: list[Callable[[State, State], None]] = []
        #: A :class:`kspark.runtime.restore.StateRestoreListener`, told about restores.
        self.restore_listener: restore.StateRestoreListener | None = None
        self._restore = restore.RestoreTracker()
        self._generation: Generation | None = None

    # -- plumbing --------------------------------------------------------------------
    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = connect()
        return self._session

    @property
    def generation(self) -> Generation:
        """The app's current checkpoint generation (a new one starts with each rescale)."""
        if self._generation is None:
            gen = current_generation(self.session, self.config.checkpoint_dir)
            if gen.num_partitions is not None and gen.num_partitions != self.config.num_partitions:
                raise ConfigError(
                    f"app {self.config.application_id} has {gen.num_partitions} "
                    f"partitions (checkpoint {gen.checkpoint}: its state is split that "
                    f"way), but its config says num_partitions={self.config.num_partitions}; "
                    f"set num_partitions={gen.num_partitions}, or move the state with "
                    f"app.rescale({self.config.num_partitions}) (`kspark rescale`)",
                    options=["num_partitions"],
                )
            self._generation = gen
        return self._generation

    def _check_state_format(self, gen: Generation, committed: bool) -> Generation:
        """Refuse a checkpoint whose state is in another state format than this kspark's;
        record a new app's first generation, so that a later start knows its state format
        and partitions."""
        from kspark_server.taskstate import STATE_FORMAT

        if gen.state_format == STATE_FORMAT:
            return gen
        if committed:
            raise ObsoleteCheckpointError(
                f"app {self.config.application_id}: checkpoint {gen.checkpoint} holds state "
                f"in state format {gen.state_format or 'unknown'}, not {STATE_FORMAT}, "
                "which this kspark cannot read. Run the app from its sources with a new "
                "checkpoint_dir (or application_id); the old checkpoint is left as it was",
                application_id=self.config.application_id,
                checkpoint=gen.checkpoint,
            )
        gen = attrs.evolve(
            gen, num_partitions=self.config.num_partitions, state_format=STATE_FORMAT
        )
        write_generation(self.session, self.config.checkpoint_dir, gen)
        self._generation = gen
        return gen

    def _refuse_obsolete(self, gen: Generation, committed: bool) -> None:
        """Refuse a checkpoint whose state the removed ``transform_with_state`` runner
        kept in Spark's state store (a generation that runner's rescale made, or a query
        checkpoint with its operator), which this kspark cannot read: nothing runs."""
        found = (
            f"the generation's initial state ({', '.join(sorted(gen.initial_state.values()))})"
            if gen.initial_state
            else (tws_state(self.session, gen.checkpoint) if committed else None)
        )
        if found is None:
            return
        raise ObsoleteCheckpointError(
            f"app {self.config.application_id}: checkpoint {gen.checkpoint} holds the state "
            "of the removed stateful_runner='transform_with_state', in Spark's state store "
            f"({found}); kspark keeps its operators' state in its own files and cannot read "
            "that store, nor migrate it. Run the app from its sources with a new "
            "checkpoint_dir (or application_id); the old checkpoint is left as it was",
            application_id=self.config.application_id,
            checkpoint=gen.checkpoint,
        )

    def _forget_generation(self) -> None:
        self._generation = None
        self._output = None

    @property
    def checkpoint_location(self) -> str:
        """The streaming query's checkpoint: ``<checkpoint_dir>/query`` until a rescale."""
        return self.generation.checkpoint

    def rescale(
        self,
        partitions: int,
        *,
        progress: bool | ProgressMode | ProgressReporter | None = "auto",
    ) -> rescaling.RescaleReport:
        """Move the app's state to ``partitions`` partitions, keeping every entry, and
        switch the app to it; the config changes to ``num_partitions=partitions``.

        A running app goes on processing while the new layout is built and caught up,
        then pauses for about one restart (:mod:`kspark.runtime.regroup`). A stopped app
        stays stopped.

        Examples
        --------
        >>> print(app.rescale(8).summary())  # doctest: +SKIP
        rescaled payments from 4 to 8 partitions in 6.2s: generation 1 ...
        """
        reporter = resolve_progress(progress, label=f"{self.config.application_id} rescale")
        try:
            report = rescaler.rescale(self, partitions, reporter.phase)
        except BaseException:
            reporter.close()
            raise
        reporter.close(report.summary())
        return report

    def _set_state(self, state: State) -> None:
        old, self._state = self._state, state
        if old is not state:
            for listener in self._listeners:
                listener(old, state)

    def set_state_listener(self, listener: Callable[[State, State], None]) -> None:
        """Call ``listener(old, new)`` on every state change."""
        self._listeners.append(listener)

    @property
    def query(self) -> Any:
        """The app's Spark ``StreamingQuery``: the running one, or the last one if the app
        has stopped; None before the first start.

        Read-only; to stop the app use :meth:`stop` rather than the query's ``stop``, so
        that the app's state and metrics follow.

        Returns
        -------
        pyspark.sql.connect.streaming.StreamingQuery or None

        Examples
        --------
        >>> app = StreamsApp(topology, StreamsConfig(application_id="payments"))  # doctest: +SKIP
        >>> app.query is None  # doctest: +SKIP
        True
        >>> app.start().query.isActive  # doctest: +SKIP
        True
        >>> app.query.lastProgress["batchId"]  # doctest: +SKIP
        3
        """
        return self._query

    @property
    def state(self) -> State:
        """The app's life-cycle state.

        ``RESTORING`` from the start of a run over an existing checkpoint until the run's
        first micro-batch completes: Spark loads the stores' state inside that batch
        (see :meth:`restores`). Then ``RUNNING``, and ``NOT_RUNNING`` or ``ERROR`` once the
        query ends.
        """
        if self._query is not None and self._state in (State.RUNNING, State.RESTORING):
            active = self._query.isActive
            if self._state is State.RESTORING or not active:
                self._collect()  # leaves RESTORING once the run's first batch is reported
            if not active:
                self._set_state(State.ERROR if self._query.exception() else State.NOT_RUNNING)
        return self._state

    def compiled(self) -> Output:
        """The app's stages, of its topology cut into sub-topologies at internal topics (:mod:`kspark.runtime.internal`)."""
        if self._output is None:
            self._output, self._internal = internal.compile_app(
                self.topology, self.config, self.sink_types
            )
        return self._output

    def uncut(self) -> Output:
        """The app's stages without internal topics: the in-process engine's, which runs
        every operator in one pass."""
        return compile_topology(self.topology, self.config, sink_types=self.sink_types)

    def _start_query(self, available_now: bool, again: bool = False) -> Any:
        """Start the app's streaming query: the start-up sequence, step by step. ``again``:
        a further round of a run, which keeps the run's state and restore report."""
        if self._query is not None and self._query.isActive:
            raise StreamsAppError(f"app {self.config.application_id} is already running")
        gen = self.generation  # first: checks the config against a rescaled checkpoint
        output = self.compiled()
        for topic in self._internal:
            # the file source of an internal topic lists its folder from the first batch
            assert topic.path is not None
            os.makedirs(topic.path, exist_ok=True)
        self._prepare_session(output)
        plan = self._plan_start(output, gen)
        writer = self._trigger(self._sink(output, plan), available_now)
        self._query = writer.start()
        checkpoint = plan.generation.checkpoint
        if not again:
            self._restore.begin(self._query, output, checkpoint, restoring=plan.restoring)
        standby_copies.start(self, output, checkpoint)  # num_standby_replicas: the copies' thread
        self._set_state(State.RESTORING if plan.restoring and not again else State.RUNNING)
        return self._query

    def _prepare_session(self, output: Output) -> None:
        """Ship the app's code to the workers, check that they can run it (before any
        query starts), and set the session's Spark settings."""
        shipping.ship(
            self.topology,
            extra=[
                self.config.processing_exception_handler,
                self.config.production_exception_handler,
            ],
        )
        workers.check(self.session, output, self.config)
        shipping.server_code(by_reference=workers.same_server_code(self.session))
        spark = self.session
        spark.conf.set(
            "spark.sql.shuffle.partitions", str(self.config.effective_shuffle_partitions)
        )
        for k, v in [*state_store_conf(self.config), *self.config.spark_conf]:
            spark.conf.set(k, v)

    def _plan_start(self, output: Output, gen: Generation) -> StartPlan:
        """Where the query starts from: its checkpoint generation (its state format
        checked), what it resumes, whether it restores state, and how its sinks write."""
        spark = self.session
        stateful = bool(restore.store_order(output))
        # one read of the checkpoint's commits: whether there is state to restore
        committed = stateful and last_committed(spark, gen.checkpoint) is not None
        if stateful or gen.initial_state:
            self._refuse_obsolete(gen, committed)
        if stateful:
            gen = self._check_state_format(gen, committed)
        resume = gen.resume(committed)
        return StartPlan(
            generation=gen,
            resume=resume,
            restoring=stateful and (committed or bool(resume and resume.has_state)),
            sink_mode=filesink.choose(spark, output, self.config, gen, stateful=stateful),
        )

    def _sink(self, output: Output, plan: StartPlan) -> Any:
        """The app's DataFrame with its writer: Spark's file sink, or kspark's (a lease)."""
        spark = self.session
        df = build_dataframe(output, spark, plan.resume, plan.generation.checkpoint)
        if plan.sink_mode == "spark":
            writer = filesink.spark_writer(df, output)
        else:
            writer = df.writeStream.foreachBatch(
                writer_function(
                    output,
                    spark,
                    batch_offset=plan.generation.batch_offset,
                    lease=(self.config.checkpoint_dir, self._new_run(), self.config.application_id),
                )
            )
        return writer.queryName(self.config.application_id).option(
            "checkpointLocation", plan.generation.checkpoint
        )

    def _trigger(self, writer: Any, available_now: bool) -> Any:
        """``writer`` with the run's trigger: everything available now, the configured
        interval, or Spark's default (the next batch as soon as the last one ends)."""
        if available_now:
            return writer.trigger(availableNow=True)
        if self.config.trigger_interval is not None:
            millis = int(self.config.trigger_interval.total_seconds() * 1000)
            return writer.trigger(processingTime=f"{millis} milliseconds")
        return writer

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> StreamsApp:
        """Start processing continuously; returns at once."""
        self._start_query(available_now=False)
        return self

    def run_until_caught_up(
        self,
        timeout: float | None = None,
        *,
        progress: bool | ProgressMode | ProgressReporter | None = "auto",
    ) -> RunReport:
        """Process everything available now, then stop (Spark's ``availableNow`` trigger).

        Parameters
        ----------
        timeout
            Seconds to wait; None waits until the app has caught up.
        progress
            How to show batches, records and throughput while it runs: ``"auto"`` (a
            live table in Jupyter, one updating line on a terminal, nothing otherwise),
            ``True`` (always), ``False``/None, ``"terminal"``, ``"notebook"``, or a
            :class:`~kspark.runtime.progress.ProgressReporter`.

        Raises
        ------
        ProcessingError, HandlerError, StreamsAppError
            If the app failed; the message names the processor and the record.
        """
        self.compiled()  # finds the internal topics
        seen = internal.batch_files(self._internal)
        report, done = self._run_available(timeout, progress)
        # records that a micro-batch wrote to an internal topic are read by the next
        # ones: run again until a run writes none (docs/design/sub-topologies.md). The
        # rounds are one run to the app's listeners: one RUNNING, one restore report.
        while self._internal and done:
            now = internal.batch_files(self._internal)
            if now == seen:
                break
            seen = now
            again, done = self._run_available(timeout, progress, again=True)
            report = RunReport(
                batches=report.batches + again.batches,
                input_records=report.input_records + again.input_records,
                output_records=report.output_records + again.output_records,
                seconds=report.seconds + again.seconds,
            )
        if done:
            self._set_state(State.NOT_RUNNING)
        return report

    def _run_available(
        self,
        timeout: float | None,
        progress: bool | ProgressMode | ProgressReporter | None,
        again: bool = False,
    ) -> tuple[RunReport, bool]:
        """One query with Spark's ``availableNow`` trigger, and whether it finished;
        ``again``: a further round of the same run (:meth:`run_until_caught_up`)."""
        reporter = resolve_progress(progress, label=self.config.application_id)
        before = set(self._batches.keys())
        t0 = time.perf_counter()
        try:
            query = self._start_query(available_now=True, again=again)
            done = self._await(query, timeout, reporter)
        except BaseException:
            reporter.close()  # keep the last figures: the error explains the rest
            raise
        seconds = time.perf_counter() - t0
        new = Totals.of(self._batches.figures(k for k in self._batches.keys() if k not in before))
        if done and new.batches:  # a run without batches never wrote its lease
            self._release()
        report = RunReport(
            batches=new.batches,
            input_records=new.records_in,
            output_records=new.records_out,
            seconds=seconds,
        )
        reporter.close(report.summary())
        return report, done

    def _await(
        self, query: Any, timeout: float | None, reporter: ProgressReporter | None = None
    ) -> bool:
        try:
            if reporter is not None and not isinstance(reporter, NullProgress):
                done = watch(query, reporter, timeout=timeout)
            elif timeout is None:
                query.awaitTermination()
                done = True
            else:
                done = bool(query.awaitTermination(timeout))
        except Exception as exc:
            self._collect()
            self._set_state(State.ERROR)
            raise translate_failure(exc, self.config.application_id, log=True) from exc
        finally:
            self._collect()
        return done

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the app stops; True if it did within ``timeout`` seconds."""
        if self._query is None:
            return True
        done = self._await(self._query, timeout)
        if done:
            self._set_state(State.NOT_RUNNING)
        return done

    def _new_run(self) -> str:
        """A token for the run about to start, which its lease names (:mod:`.lease`)."""
        token = uuid.uuid4().hex
        self._runs.append(token)
        return token

    def _release(self) -> None:
        """Say in the checkpoint that this object's last run ended, so that another
        session may rescale the app at once (its lease would hold for some seconds)."""
        if self._runs and self._runs[-1] not in self._released:
            token = self._runs[-1]
            self._released.add(token)
            try:
                lease.release(self.session, self.config.checkpoint_dir, token)
            except Exception as exc:  # the lease then expires by itself
                _log.warning("could not release the lease of run %s: %s", token, exc)

    def stop(self) -> None:
        """Stop the streaming query, if running."""
        if self._query is not None and self._query.isActive:
            self._set_state(State.PENDING_SHUTDOWN)
            standby_copies.stop(self)
            self._query.stop()
            self._release()
        self._collect()
        if self._state is not State.ERROR:
            self._set_state(State.NOT_RUNNING)

    def close(self) -> None:
        self.stop()

    def store(self, name: str) -> Any:
        """A read-only view of state store ``name`` (interactive queries).

        It reads the app's checkpoint with Spark's state reader, so it needs no running
        query; the answer is the state as of the last committed micro-batch. A versioned
        table's store answers ``get(key)``, ``get(key, as_of=ts)`` and
        ``versions(key, from_ts, to_ts)``; a latest-value table's store answers
        ``get(key)``; a windowed aggregation's ``fetch(key, time_from, time_to)``; a
        session-windowed one's ``fetch(key)``, ``find_sessions(key, earliest_end,
        latest_start)`` and ``fetch_session(key, start, end)``.

        Parameters
        ----------
        name
            The store's name, as given to ``Materialized.as_versioned(name, ...)``
            (``Topology.describe()`` lists the stores).

        Returns
        -------
        kspark.runtime.stores.ReadOnlyKeyValueStore or another view of kspark.runtime.stores

        Examples
        --------
        >>> rates = app.store("rates")  # doctest: +SKIP
        >>> rates.get("EUR", as_of=1_700_000_000_000)  # doctest: +SKIP
        ValueAndTimestamp(value=Rate(currency='EUR', rate=1.08), timestamp=1699999990000)
        """
        from kspark.runtime.stores import open_store

        return open_store(
            self.session,
            self.checkpoint_location,
            self.compiled(),
            name,
            self.generation.seeds,
        )

    def replica(self, name: str) -> Any:
        """A client-side replica of table store ``name``: loaded once, then kept current
        with :meth:`~kspark.runtime.stores.StoreReplica.refresh` from the checkpoint's
        change feed, and answering reads from memory even while the app is down (the
        standby-replica idea for interactive queries; see docs/deployment.md).

        Examples
        --------
        >>> rates = app.replica("rates")  # doctest: +SKIP
        >>> rates.refresh()  # doctest: +SKIP
        4
        >>> rates.get("EUR", as_of=1_700_000_000_000)  # doctest: +SKIP
        ValueAndTimestamp(value=Rate(currency='EUR', rate=1.08), timestamp=1699999990000)
        """
        from kspark.runtime.stores import StoreReplica

        replica = StoreReplica(
            self.session,
            self.checkpoint_location,
            self.compiled(),
            name,
            self.generation.seeds,
        )
        replica.refresh()
        return replica

    def outputs(self) -> tuple[OutputInfo, ...]:
        """Where the app writes: each sink topic, then the dead-letter queue, once each
        (not the internal topics between sub-topologies, which are kept in the checkpoint).

        The locations are the bound topics' own, made absolute on the client when their
        ``Topic`` or ``StreamsConfig`` was made (docs/deployment.md, "Paths"), so they name
        the folders the app writes whatever the server's working directory.

        Examples
        --------
        >>> from kspark import StreamsBuilder, StreamsConfig
        >>> b = StreamsBuilder()
        >>> b.stream("orders").to("checked")
        >>> app = StreamsApp(b.build(), StreamsConfig(application_id="shop", data_dir="/data"))
        >>> [o.describe() for o in app.outputs()]
        ['checked (jsonl) -> /data/checked/']
        """
        seen: dict[str, OutputInfo] = {}
        for part in self.compiled().sinks:
            # the internal topics between sub-topologies are the app's own, in its
            # checkpoint, as Kafka Streams' repartition topics are not the user's output
            if (INTERNAL_OPTION, "true") not in part.topic.options:
                seen.setdefault(part.topic.name, OutputInfo.of(part.topic))
        dlq = self.config.dead_letter_queue_topic
        if dlq is not None:
            seen.setdefault(dlq.name, OutputInfo.of(dlq, dead_letter_queue=True))
        return tuple(seen.values())

    def read_output(self, name: str) -> Any:
        """What the app has written to output topic ``name`` (a sink or the dead-letter
        queue), as a batch DataFrame of the app's session.

        It reads the location :meth:`outputs` gives, the one the app writes, so a relative
        ``data_dir`` or topic path means the same folder for the app and for this read;
        ``spark.read.json("data/out")`` would resolve ``data`` on the server, against its
        own working directory. File topics are read with Spark's reader of their format
        (both layouts, :mod:`kspark.runtime.filesink`), tables by name.

        Parameters
        ----------
        name
            The output topic's name, as the topology or the config names it.

        Returns
        -------
        pyspark.sql.DataFrame
            The records as written: ``key``, ``value``, ``timestamp`` (and ``batch_id``
            for batch folders) in the envelope layout.

        Raises
        ------
        InvalidArgumentError
            If ``name`` is not an output of the app, or is a Kafka topic (read those with
            a Kafka consumer).

        Examples
        --------
        >>> app.run_until_caught_up()  # doctest: +SKIP
        >>> app.read_output("converted").select("key", "value.*").show()  # doctest: +SKIP
        """
        outputs = {o.name: o for o in self.outputs()}
        out = outputs.get(name)
        if out is None:
            raise InvalidArgumentError(
                f"app {self.config.application_id} writes no topic {name!r}; its outputs: "
                f"{sorted(outputs)}",
                parameter="name",
            )
        if out.format == "kafka":
            raise InvalidArgumentError(
                f"output {name!r} is the Kafka topic {out.location}: read it with a Kafka consumer",
                parameter="name",
            )
        reader = self.session.read
        if out.format == "table":
            return reader.table(out.location)
        if out.format == "csv":
            reader = reader.option("header", "true")
        return reader.format(FILE_FORMATS[out.format]).load(out.location)

    def __enter__(self) -> StreamsApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- reporting -------------------------------------------------------------------
    def _collect(self) -> None:
        if self._query is None:
            return
        try:
            progresses = self._query.recentProgress
        except Exception:
            return
        for p in progresses:
            self._batches.add(progress_as_dict(p))
        if (
            self._restore.observe(self._batches.by_key(), self.restore_listener)
            and self._state is State.RESTORING
        ):
            self._set_state(State.RUNNING)

    def restores(self) -> list[restore.RestoreReport]:
        """What the current (or last) run restored, one report per store.

        Spark loads state lazily, inside the first micro-batch of a run, so the reports
        appear once that batch has completed; they are empty for a fresh app.

        Examples
        --------
        >>> app.run_until_caught_up()  # doctest: +SKIP
        >>> [(r.store, r.rows, round(r.seconds, 2)) for r in app.restores()]  # doctest: +SKIP
        [('seen', 100000, 0.41)]
        """
        self._collect()
        return self._restore.reports()

    def clean_up(self) -> localstate.CleanUpReport:
        """Delete the app's executor-local stores, as Kafka Streams' ``cleanUp()``: the
        next run rebuilds them from the checkpoint (which is kept).

        It deletes the folders ``<root>/<application_id>`` that kspark marked as its own,
        under the roots this process sees (:func:`kspark.runtime.localstate.roots`). On a
        cluster, delete ``<state_dir>/<application_id>`` on each executor's disk.

        Raises
        ------
        AppAlreadyRunningError
            If the app runs (or restores, or is stopping): stop it first.

        Examples
        --------
        >>> app.stop()  # doctest: +SKIP
        >>> print(app.clean_up().summary())  # doctest: +SKIP
        removed /home/me/.kspark/local-state/clicks
        """
        if self.state in (State.RUNNING, State.RESTORING, State.PENDING_SHUTDOWN):
            raise AppAlreadyRunningError(
                f"app {self.config.application_id!r} is {self.state.value}: stop it "
                "(app.stop()) before app.clean_up() deletes its local stores",
                application_id=self.config.application_id,
            )
        return localstate.clean_up(self.config.application_id, self.config.state_dir)

    def progress(self) -> list[dict[str, Any]]:
        """Every micro-batch's progress seen so far, oldest first."""
        self._collect()
        return self._batches.progress()

    def metrics(self) -> Metrics:
        """Counts over all micro-batches this app object ran (see
        :mod:`kspark.runtime.metrics` for how they are counted)."""
        self._collect()
        return Metrics.of(self._batches.figures())

    def describe(self) -> str:
        return self.topology.describe()
