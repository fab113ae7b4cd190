"""The size of a query's Spark Connect plan when the workers lack kspark.

    ./run bench plan_size [--run]

Starts the embedded server with workers that cannot import kspark nor kspark_server (the
tests' import blocker, tests/support/blocker), then builds the plan of a one-deduplication app and of a deduplication followed by a count per key: the
size of the serialized plan, the number of pickled Python functions in it and the largest,
and the pickled ``foreachBatch`` writer, with ``kspark_server`` in bundles (as these
workers need) and by reference (as workers that import the client's very sources get).
With ``--run``, it also runs the two-operator app (three records) and
prints the "Broadcasting large task binary" sizes that the server logged (Spark logs a
task binary over 1 MiB).
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from pyspark import cloudpickle

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler.lowering.build import build_dataframe
from kspark.compiler.lowering.sinks import writer_function
from kspark.runtime import shipping
from kspark.runtime.server import EmbeddedServer

BLOCKER = str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "support" / "blocker")


def commands(msg: Any, out: list[int]) -> list[int]:
    """The sizes of the pickled Python functions (``command`` fields) in a plan."""
    for fd, val in msg.ListFields():
        if fd.name == "command" and isinstance(val, bytes):
            out.append(len(val))
        elif fd.type == fd.TYPE_MESSAGE:
            # one message, a repeated field, or a map
            if hasattr(val, "ListFields"):
                items = [val]
            else:
                items = list(val.values()) if hasattr(val, "values") else list(val)
            for v in items:
                if hasattr(v, "ListFields"):
                    commands(v, out)
    return out


def dedup(b: StreamsBuilder, src: Any, two: bool) -> Any:
    d = b.stream(src, key_type=str, value_type=int).deduplicate_by_key(timedelta(minutes=1))
    d = d.map_values(lambda v: v + 1, value_type=int)
    return d.group_by_key().count().to_stream() if two else d


def measure(spark: Any, two: bool) -> str:
    tmp = pathlib.Path(tempfile.mkdtemp())
    (tmp / "events").mkdir()
    b = StreamsBuilder()
    dedup(b, Topic.jsonl("events", str(tmp / "events")), two).to(
        Topic.parquet("out", str(tmp / "out"))
    )
    config = StreamsConfig(application_id="plan-size", checkpoint_dir=str(tmp / "chk"))
    app = StreamsApp(b.build(), config, session=spark)
    output = app.compiled()
    for topic in app._internal:
        assert topic.path is not None
        os.makedirs(topic.path, exist_ok=True)
    app._prepare_session(output)
    parts = []
    try:
        for mode in ("bundles", "by reference"):
            shipping.server_code(by_reference=mode == "by reference")
            t0 = time.perf_counter()
            df = build_dataframe(output, spark, checkpoint=str(tmp / "chk" / "query"))
            proto = df._plan.to_proto(spark.client)
            fns = commands(proto, [])
            writer = len(cloudpickle.dumps(writer_function(output)))  # type: ignore[no-untyped-call]
            parts.append(
                f"{mode}: plan {len(proto.SerializeToString()):,} B, {len(fns)} functions "
                f"(largest {max(fns):,} B), writer {writer:,} B, "
                f"built in {time.perf_counter() - t0:.2f} s"
            )
    finally:
        shipping.server_code(by_reference=False)
    what = "dedup->count" if two else "one dedup"
    return f"{what:13s} " + "; ".join(parts)


def run(spark: Any) -> str:
    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    dedup(b, "in", True).to("out")
    config = StreamsConfig(application_id="plan-size-run")
    with TopologyTestDriver(b.build(), config, session=spark, engine="spark") as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        sink = d.create_output_topic("out", key_type=str, value_type=int)
        for k, v in [("a", 1), ("b", 2), ("a", 3)]:
            src.pipe_input(k, v)
        d.process()
        return f"ran, output {sorted(sink.read_key_values())}"


def main() -> None:
    server = EmbeddedServer(
        conf={"spark.sql.shuffle.partitions": "2"}, env={"PYTHONPATH": BLOCKER}
    ).start()
    spark = server.session()
    try:
        for two in (False, True):
            print(measure(spark, two), flush=True)
        if "--run" in sys.argv:
            print(run(spark), flush=True)
    finally:
        spark.stop()
        with open(server.log_path, errors="replace") as f:
            log = f.read()
        server.stop()
    sizes = re.findall(r"Broadcasting large task binary with size ([0-9.]+ [KMG]iB)", log)
    print(f"task binaries over 1 MiB: {len(sizes)} {sizes[:20]}")


if __name__ == "__main__":
    main()
