"""An app's checkpoint generations, and what a query checkpoint says about its progress.

A rescale (:mod:`kspark.runtime.rescale`) cannot change the partitioning of a Spark query
checkpoint, so it starts a new one: *generation* ``g`` of an app lives in
``<checkpoint_dir>/query-g<g>`` (generation 0, the app's first, in
``<checkpoint_dir>/query``). A small JSON document per generation, under
``<checkpoint_dir>/generations``, says how it continues from the one before: its number of
partitions, its first batch id, the state it starts from and where its inputs resume.

Everything here goes through Spark reads and writes, never the client's file system, so it
works the same against the embedded server and a remote cluster.
"""

from __future__ import annotations

import glob
import json
from typing import Any

import attrs

from kspark.compiler.resume import Resume
from kspark_server.paths import normalize_path

__all__ = [
    "TWS_OPERATOR",
    "Generation",
    "Progress",
    "current_generation",
    "last_committed",
    "query_progress",
    "tws_state",
    "write_generation",
]


@attrs.frozen(kw_only=True)
class Generation:
    """One query checkpoint of an app, and how it continues from the previous one."""

    number: int = 0
    checkpoint: str
    num_partitions: int | None = None
    #: the first micro-batch's number in the sinks' ``batch_id`` (batches go on counting)
    batch_offset: int = 0
    #: store name -> Parquet folder: the state a generation of the removed
    #: ``transform_with_state`` runner started from; an app refuses such a generation
    #: (:class:`kspark.errors.ObsoleteCheckpointError`), read only to say so
    initial_state: dict[str, str] = attrs.field(factory=dict)
    #: files the earlier generations consumed, which this one must not read again
    skip_files: tuple[str, ...] = ()
    #: Kafka topic -> the offsets (Spark's JSON form) where this generation starts reading
    kafka_offsets: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: the generation it was rescaled from, with its partitions (for the report)
    previous: int | None = None
    #: the state format of its stateful operators' state (``kspark_server.taskstate``);
    #: None until a stateful app first starts on it. An app refuses another format than
    #: its own
    state_format: int | None = None
    #: store -> task number (as text) -> the group state naming the new layout's files of
    #: a generation rescaled (``kspark_server.regroup``)
    seeds: dict[str, dict[str, list[Any]]] = attrs.field(factory=dict)

    def resume(self, committed: bool) -> Resume | None:
        """Where a query on this generation's checkpoint starts; None for generation 0,
        which Spark's checkpoint alone resumes. ``committed``: the checkpoint has a
        committed batch (the tasks' seeds name files until each task commits its own
        version, so they go with every start).

        Examples
        --------
        >>> g = Generation(number=1, checkpoint="c", seeds={"s": {"0": ["inc", 1]}})
        >>> g.resume(committed=True).task_seeds
        {'s': {0: ('inc', 1)}}
        """
        if self.number == 0:
            return None
        return Resume(
            skip_files=self.skip_files,
            kafka_offsets=dict(self.kafka_offsets),
            task_seeds={
                store: {int(t): tuple(v) for t, v in tasks.items()}
                for store, tasks in self.seeds.items()
            },
        )

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Generation:
        d = json.loads(text)
        d["skip_files"] = tuple(d.get("skip_files") or ())
        return cls(**d)


def _generations_dir(checkpoint_dir: str) -> str:
    return f"{checkpoint_dir.rstrip('/')}/generations"


def first_generation(checkpoint_dir: str) -> Generation:
    return Generation(number=0, checkpoint=f"{checkpoint_dir.rstrip('/')}/query")


def _collect(df: Any) -> list[Any] | None:
    """``df``'s rows, or None if the path it reads does not exist (the read says so
    itself: no call to the server first to check)."""
    from pyspark.errors import AnalysisException

    try:
        rows: list[Any] = df.collect()
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return None
        raise
    return rows


#: What Spark's operator metadata of a ``transformWithState`` operator holds (its
#: ``operatorName``), which no operator of kspark's runner has.
TWS_OPERATOR = "transformWithState"


def tws_state(spark: Any, checkpoint: str) -> str | None:
    """The operator metadata file of query checkpoint ``checkpoint`` that shows state of
    the removed ``transform_with_state`` runner (Spark's ``transformWithStateInPandas``
    state in the state store, which kspark no longer reads); None if there is none.

    Spark writes such an operator's metadata as ``state/<operator>/_metadata/v2/<batch>``
    naming the operator ``transformWithState...``; an ``applyInPandasWithState``
    operator's is ``state/<operator>/_metadata/metadata``. A local checkpoint is looked at
    from the client; another through the server.

    Examples
    --------
    >>> import os, tempfile
    >>> ckpt = tempfile.mkdtemp()
    >>> tws_state(None, ckpt) is None
    True
    >>> os.makedirs(f"{ckpt}/state/0/_metadata/v2")
    >>> with open(f"{ckpt}/state/0/_metadata/v2/0", "w") as f:
    ...     _ = f.write('{"operatorInfo":{"operatorName":"transformWithStateInPandasExec"}}')
    >>> tws_state(None, ckpt) == f"{ckpt}/state/0/_metadata/v2/0"
    True
    """
    pattern = f"{checkpoint.rstrip('/')}/state/*/_metadata/v2/*"
    local = checkpoint[len("file:") :].lstrip("/") if checkpoint.startswith("file:") else None
    if local is not None:
        pattern = f"/{local.rstrip('/')}/state/*/_metadata/v2/*"
    if local is not None or "://" not in checkpoint:
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path, "rb") as f:
                    if TWS_OPERATOR.encode() in f.read(1 << 16):
                        return path
            except OSError:
                continue
        return None
    for r in _texts(spark, pattern):
        if TWS_OPERATOR in str(r["value"]):
            return f"{checkpoint.rstrip('/')}/state/*/_metadata/v2/{r['name']}"
    return None


def _exists(spark: Any, path: str) -> bool:
    return _collect(spark.read.format("text").load(path).limit(0)) is not None


def _texts(spark: Any, path: str) -> list[Any]:
    """``(value, name)`` rows of the text files under ``path`` (a whole file per row,
    ``name`` its file name; ``path`` may be a glob); none if nothing is there. One call."""
    from pyspark.sql import functions as F

    # DataFrameReader.text() would set wholetext back to false: a row per line
    df = (
        spark.read.format("text")
        .option("wholetext", "true")
        .load(path)
        .select("value", F.col("_metadata.file_name").alias("name"))
    )
    return _collect(df) or []


def current_generation(spark: Any, checkpoint_dir: str) -> Generation:
    """The newest generation recorded under ``checkpoint_dir``; generation 0 if none is."""
    rows = _texts(spark, _generations_dir(checkpoint_dir))
    gens = [Generation.from_json(r["value"]) for r in rows if r["value"].strip()]
    if not gens:
        return first_generation(checkpoint_dir)
    return max(gens, key=lambda g: g.number)


def write_generation(spark: Any, checkpoint_dir: str, gen: Generation) -> None:
    """Record ``gen``; from then on the app runs on it."""
    path = f"{_generations_dir(checkpoint_dir)}/g={gen.number:06d}"
    spark.createDataFrame([(gen.to_json(),)], "value string").coalesce(1).write.mode(
        "overwrite"
    ).text(path)


@attrs.frozen(kw_only=True)
class Progress:
    """What a query checkpoint has done: its last planned and last committed batch, the
    offsets of the last committed batch (one JSON text per source, in source order), and
    the files its file sources consumed up to that batch."""

    last_planned: int | None
    last_committed: int | None
    offsets: tuple[str | None, ...]
    files: tuple[str, ...]


def _batch_files(spark: Any, path: str) -> dict[int, str]:
    """``{batch: text}`` of a metadata log folder (offsets, commits, a file source's log)."""
    out: dict[int, str] = {}
    for r in _texts(spark, path):
        name = str(r["name"]).removesuffix(".compact")
        if name.isdigit():
            out[int(name)] = r["value"]
    return out


def last_committed(spark: Any, checkpoint: str) -> int | None:
    """The last batch that query checkpoint ``checkpoint`` committed; None before the first.
    Reads only the commit log (:func:`query_progress` reads the offsets too)."""
    commits = _batch_files(spark, f"{checkpoint}/commits")
    return max(commits) if commits else None


def query_progress(spark: Any, checkpoint: str, committed: int | None = None) -> Progress:
    """Read ``checkpoint``'s offsets, commits and file-source logs; with ``committed``
    (the last committed batch, read before by the caller, the query stopped), not the
    commits again. A file counts as consumed when its source's log lists it at or before
    that source's offset in the last committed batch (:mod:`kspark.runtime.sourcelogs`)."""
    from kspark.runtime import sourcelogs

    offsets = _batch_files(spark, f"{checkpoint}/offsets")
    if committed is None:
        committed = last_committed(spark, checkpoint)
    per_source: tuple[str | None, ...] = ()
    files: set[str] = set()
    if committed is not None and committed in offsets:
        history = [_lines(offsets[b]) for b in sorted(offsets) if b <= committed]
        per_source = history[-1]
        files = {
            normalize_path(f)
            for f in sourcelogs.consumed_files(
                history, _source_logs(spark, checkpoint), settled=max(offsets) == committed
            )
        }
    return Progress(
        last_planned=max(offsets) if offsets else None,
        last_committed=committed,
        offsets=per_source,
        files=tuple(sorted(files)),
    )


def _lines(text: str) -> tuple[str | None, ...]:
    """An offsets file's lines of its sources: ``v1``, then the batch's metadata, then one
    line per source occurrence (``-`` when it has no offset yet: None)."""
    lines = text.splitlines()[2:]
    return tuple(None if ln.strip() in ("", "-") else ln for ln in lines)


def _source_logs(spark: Any, checkpoint: str) -> dict[int, dict[int, list[str]]]:
    """Folder ``sources/<i>`` -> file-source log batch -> the files it lists (a compacted
    log batch lists the earlier batches' files, each entry with its own batch)."""
    from pyspark.sql import functions as F

    df = (
        spark.read.format("text")
        .option("wholetext", "true")
        .load(f"{checkpoint}/sources/*/*")
        .select("value", F.col("_metadata.file_path").alias("path"))
    )
    out: dict[int, dict[int, list[str]]] = {}
    for r in _collect(df) or []:
        parts = str(r["path"]).rstrip("/").split("/")
        folder, name = parts[-2], parts[-1]
        if not folder.isdigit() or not name.removesuffix(".compact").isdigit():
            continue
        log = out.setdefault(int(folder), {})
        for line in str(r["value"]).splitlines():
            if not line.startswith("{"):
                continue
            entry = json.loads(line)
            if isinstance(entry, dict) and "path" in entry and "batchId" in entry:
                log.setdefault(int(entry["batchId"]), []).append(str(entry["path"]))
    return {f: log for f, log in out.items() if log}
