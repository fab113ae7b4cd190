"""The parts that many operator specs share: the exception handling, the byte limit of a
Kafka sink, which values travel as JSON, where a sink writes and how state is kept.

They are no operators themselves, so they stand below the stateless, stateful and sink
specs that hold them.
"""

from __future__ import annotations

import dataclasses

from kspark_server.contract.version import SPEC_VERSION, SpecError
from kspark_server.handlers import Handler
from kspark_server.paths import normalize_path

__all__ = [
    "BASE_CHUNK_BYTES",
    "Handling",
    "OperatorFields",
    "Packed",
    "RecordLimit",
    "StateOptions",
    "TopicRef",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Handling:
    """The exception handlers and where they run (the task ids in their contexts)."""

    processing: Handler | None = None
    production: Handler | None = None
    subtopology: int = 0
    num_partitions: int = 1
    #: records an operator drops by its rules (a null key, an expired put...) also go to
    #: the dead-letter queue (``StreamsConfig.dead_letter_dropped_records``)
    dead_letter_dropped: bool = False
    #: the built-in deserialization handler's mode, for values whose class refuses them
    #: when they are decoded in a worker: ``fail``, ``continue`` or ``dlq``
    deserialization: str = "fail"


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorFields:
    """The fields of every spec of an operator that runs one processor of the topology:
    the contract's version, the processor's name, the output's Spark schema (JSON) and
    the exception handling."""

    spec_version: int = SPEC_VERSION
    processor: str
    output_schema: str
    handling: Handling = Handling()


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordLimit:
    """The byte limit of the Kafka topic a chain feeds (``kspark_server.recordsize``): a
    record over it goes to the production handler under the sink's name."""

    processor: str
    topic: str
    max_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Packed:
    """Which values travel through a stateful operator as JSON text (the stream's value,
    the table's value, the output value); see ``kspark.plan.types.json_packable``."""

    value: bool = False
    tvalue: bool = False
    out: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopicRef:
    """Where a sink writes: as ``kspark.Topic`` says, without its reading options."""

    name: str
    format: str
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def ordered(self) -> bool:
        """Whether the sink writes one file sorted by position (a test driver's topic)."""
        return dict(self.options).get("kspark.ordered") == "true"

    @property
    def internal(self) -> bool:
        """Whether the topic is an internal topic between sub-topologies, which the app
        reads again (docs/design/sub-topologies.md): a batch without records for it
        writes nothing, so that no micro-batch is started for an empty file."""
        return dict(self.options).get("kspark.internal") == "true"

    @property
    def destination(self) -> tuple[str, ...]:
        """What the sink writes into: records of sinks with one destination are written
        together, once per batch, so that neither replaces the other's ``batch_id=N``."""
        if self.format == "kafka":
            servers = dict(self.options).get("kafka.bootstrap.servers", "")
            return ("kafka", servers, self.name)
        if self.format == "table":
            # Spark's catalog compares table names without case by default
            return ("table", (self.path or self.name).lower())
        return ("files", normalize_path(self.path or ""))


#: The size of a base chunk of a task's durable state (``StreamsConfig``'s
#: ``state_base_chunk_bytes``; :mod:`kspark_server.taskstate`).
BASE_CHUNK_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateOptions:
    """How a stateful operator keeps its task state (``StreamsConfig``'s
    ``state_base_chunk_bytes`` and ``state_check_log``).

    ``base_chunk_bytes``: a base chunk holds keys until its pairs pass this many bytes.
    ``check_log``: after each batch, read the durable base and log back and compare them
    with the task state (slow: for tests); changes are then logged against bases of any
    size, so that small states take the log path too.
    """

    base_chunk_bytes: int = BASE_CHUNK_BYTES
    check_log: bool = False
    #: where the executors keep the tasks' local stores (``StreamsConfig``'s
    #: ``state_dir``; empty: :func:`kspark_server.localstore.root_dir`)
    local_dir: str = ""
    #: the application whose local stores these are: they live in
    #: ``<local_dir>/<application_id>`` (:func:`kspark_server.localstore.app_dir`), apart
    #: from other apps' and where clean-up finds them
    application_id: str = ""
    #: fault injection, set by tests only (no config reaches it): a task at its batch
    #: number ``kill_after_files`` (its count of batches, from 1) kills its own worker
    #: process with SIGKILL once the batch's files are written, before Spark commits the
    #: version that names them; 0: never
    kill_after_files: int = 0

    def __post_init__(self) -> None:
        if self.base_chunk_bytes <= 0:
            raise SpecError(f"base_chunk_bytes must be positive, got {self.base_chunk_bytes}")
        if self.kill_after_files < 0:
            raise SpecError(f"kill_after_files must be >= 0, got {self.kill_after_files}")
