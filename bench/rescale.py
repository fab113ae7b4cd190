"""Rescale: the pause a running deduplication app's output sees when it goes from 4 to 8
tasks, warm (``app.rescale(8)`` on the running app) and offline (stop, ``rescale``,
start), against a plain restart (stop, start) of the same app.

    ./run bench rescale [--keys 1000000] [--small 1000] [--every 0.5]

The app runs with a ``state_dir`` of its own. It
loads ``--keys`` distinct keys in one micro-batch; from then on a feeder writes a file of
``--small`` new keys every ``--every`` seconds, the whole time, so records keep arriving
during every step; each micro-batch takes every file there is (a rescaled checkpoint's
first micro-batch lists the input folder afresh and leaves out the files consumed before,
which ``max_files_per_trigger`` would spread over one micro-batch per file). Each step's *pause* is the time between the last micro-batch with
input that the app committed before the step and the first one after it (both from query
progress: the batch's start plus its duration). The steps (``--steps``), by default: a
restart at 4 tasks, the warm rescale to 8, a restart at 8, the offline rescale back to 4
and the offline rescale to 8 again (the same state, 4 -> 8 both ways). Ratios are to the
fastest plain restart.

It starts its own server: do not run it next to another Spark JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import itertools

from _common import workdir
from restore import T0, topology, wait_batches, write

from kspark import StreamsApp, StreamsConfig
from kspark.runtime.metrics import input_rows
from kspark.runtime.server import EmbeddedServer


def ends(app: StreamsApp) -> list[float]:
    """The end times (server clock, seconds) of the app's micro-batches with input."""
    out = []
    for p in app.progress():
        if input_rows(p) <= 0:
            continue
        start = datetime.datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00"))
        out.append(start.timestamp() + float(p["durationMs"]["triggerExecution"]) / 1000)
    return sorted(out)


class Feeder(threading.Thread):
    def __init__(self, path: str, first_key: int, n: int, every: float) -> None:
        super().__init__(daemon=True)
        self.path, self.next_key, self.n, self.every = path, first_key, n, every
        self.done = threading.Event()
        self.files = 0

    def run(self) -> None:
        while not self.done.is_set():
            self.files += 1
            write(
                self.path, f"{self.files:06d}-small.parquet", self.next_key, self.n, T0 + self.files
            )
            self.next_key += self.n
            self.done.wait(self.every)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--small", type=int, default=1000)
    p.add_argument("--every", type=float, default=0.5)
    p.add_argument("--settle", type=int, default=4, help="batches with input between steps")
    p.add_argument(
        "--steps",
        default="restart,warm:8,restart,offline:4,offline:8",
        help="restart, warm:M (app.rescale(M) while it runs), offline:M (stop, rescale, start)",
    )
    a = p.parse_args()
    server = EmbeddedServer(conf={"spark.sql.shuffle.partitions": "4"}).start()
    base = workdir()
    inp = f"{base}/in"
    results: list[tuple[str, float, float]] = []
    try:
        spark = server.session()
        cfg = StreamsConfig(
            application_id="rescale",
            checkpoint_dir=f"{base}/chk",
            num_partitions=4,
            state_dir=f"{base}/local",
        )
        write(inp, "000000-load.parquet", 0, a.keys, T0)
        app = StreamsApp(topology(inp, f"{base}/out"), cfg, session=spark)
        t0 = time.perf_counter()
        app.start()
        wait_batches(app.query, 1)
        print(f"{a.keys:,} keys loaded in {time.perf_counter() - t0:.1f}s", flush=True)
        feeder = Feeder(inp, a.keys, a.small, a.every)
        feeder.start()

        def settle() -> None:
            wait_batches(app.query, a.settle)

        def step(name: str, work: Any) -> None:
            settle()
            before = ends(app)
            t = time.perf_counter()
            extra = work()
            wall = time.perf_counter() - t
            settle()
            after = ends(app)
            # the longest the output waited for a batch, from the last batch before the step
            window = [e for e in after if e >= max(before)]
            pause = max(b - a_ for a_, b in itertools.pairwise(window))
            gaps = [b - a_ for a_, b in itertools.pairwise(before)][-10:]
            results.append((name, pause, wall))
            print(
                f"{name:22} output pause {pause:6.2f}s  (call {wall:6.2f}s, batch gap before "
                f"{statistics.median(gaps) if gaps else 0:.2f}s){extra or ''}",
                flush=True,
            )
            for r in app.restores():
                print(
                    f"    local stores of the new run: {r.reused_tasks} reused, "
                    f"{r.caught_up_tasks} caught up, {r.rebuilt_tasks} rebuilt "
                    f"({r.entries_rebuilt:,} entries)",
                    flush=True,
                )
            if os.environ.get("KSPARK_BENCH_DETAIL"):
                print("   ", [round(e - window[0], 2) for e in window], flush=True)
                first_run = app.query.recentProgress[:1]
                for p_ in first_run:
                    print("    first batch of the new run:", p_.durationMs, flush=True)

        def restart() -> str:
            app.stop()
            app.start()
            return ""

        def warm(m: int) -> str:
            r = app.rescale(m, progress=False)
            return f"  [{r.rounds} catch-up round(s), switch {r.switch_seconds or 0:.2f}s]"

        def offline(m: int) -> str:
            app.stop()
            r = app.rescale(m, progress=False)
            app.start()
            return f"  [rescale {r.seconds:.2f}s]"

        try:
            n = 4
            for what in a.steps.split(","):
                kind, _, to = what.partition(":")
                if kind == "restart":
                    step(f"restart at {n}", restart)
                elif kind == "warm":
                    step(f"warm rescale {n} -> {to}", lambda m=int(to): warm(m))
                else:
                    step(f"offline rescale {n} -> {to}", lambda m=int(to): offline(m))
                n = int(to or n)
        finally:
            feeder.done.set()
            feeder.join()
            app.stop()
    finally:
        with contextlib.suppress(Exception):
            spark.stop()
        server.stop()
    pauses = dict((n, p) for n, p, _ in results)
    restart_pause = min((p for n, p in pauses.items() if n.startswith("restart")), default=1e-9)
    print(f"\n| step ({a.keys:,} keys) | output pause | ratio to a plain restart |")
    print("| --- | ---: | ---: |")
    for name, pause, _ in results:
        print(f"| {name} | {pause:.2f}s | {pause / restart_pause:.2f} |")


if __name__ == "__main__":
    main()
