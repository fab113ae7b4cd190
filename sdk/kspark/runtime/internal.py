"""An app's internal topics: a topology with several stateful operators is cut into sub-topologies, whose records cross internal topics
in the checkpoint (:mod:`kspark.compiler.subtopologies`, docs/design/sub-topologies.md)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from kspark.compiler import stages as st
from kspark.compiler import subtopologies
from kspark.compiler.bundle import shipped
from kspark.compiler.compiler import compile_topology
from kspark.config import StreamsConfig
from kspark.plan.topics import TopicSpec
from kspark.plan.topology import Topology
from kspark.plan.types import TypeDesc

__all__ = ["batch_files", "compile_app", "drop_batches_from"]


def compile_app(
    topology: Topology,
    config: StreamsConfig,
    sink_types: dict[str, tuple[TypeDesc | None, TypeDesc | None]],
) -> tuple[st.Output, tuple[TopicSpec, ...]]:
    """The app's stages and its internal topics (none unless the topology is cut)."""
    output = compile_topology(topology, config, sink_types=sink_types)
    stateful = {s.spec.processor for s in output.stages() if isinstance(s, st.Stateful)}
    cut = subtopologies.cut(topology, stateful, config.checkpoint_dir, config.application_id)
    if cut is topology:
        return output, ()
    # a processor's task ids (its dead letters' task_id) name its sub-topology in the
    # user's topology, as they do in the in-process engine
    numbers = {node.name: i for i, group in enumerate(topology.subtopologies()) for node in group}
    return (
        compile_topology(cut, config, sink_types=sink_types, subtopology_of=numbers),
        subtopologies.internal_topics(cut),
    )


def drop_batches_from(spark: Any, internal: tuple[TopicSpec, ...], first: int) -> list[str]:
    """Remove the internal topics' batch folders of batches ``first`` and later (one Spark
    job, on an executor, which sees the checkpoint as the query's tasks do); the folders
    removed. A rescale's switch calls it with the new generation's first batch: a folder
    of a later batch holds the output of an old-layout batch that did not commit."""
    from kspark_server import regroup

    paths = [t.path for t in internal if t.path is not None]
    if not paths:
        return []
    rows = spark.range(1).mapInPandas(shipped(regroup.drop_batches(paths, first)), "dropped string")
    return [str(r["dropped"]) for r in rows.collect()]


def batch_files(internal: tuple[TopicSpec, ...]) -> set[str]:
    """The files of the batch folders written to the internal topics: a batch run again
    (after a failure) writes its folder anew, under new file names."""
    found: set[str] = set()
    for topic in internal:
        assert topic.path is not None
        with contextlib.suppress(OSError):
            for name in os.listdir(topic.path):
                if name.startswith(("_", ".")):
                    continue
                folder = os.path.join(topic.path, name)
                with contextlib.suppress(OSError):
                    found |= {
                        os.path.join(folder, f)
                        for f in os.listdir(folder)
                        if not f.startswith(("_", "."))
                    }
    return found
