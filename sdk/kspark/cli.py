"""The ``kspark`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tomllib
from typing import Any

from kspark.config import StreamsConfig
from kspark.errors import KSparkError
from kspark.plan.topology import Topology


def load_topology(ref: str) -> Topology:
    """``module:attr``: a Topology, or a function returning one."""
    if ":" not in ref:
        raise SystemExit(f"expected module:topology, got {ref!r}")
    module_name, attr = ref.split(":", 1)
    sys.path.insert(0, os.getcwd())
    obj: Any = getattr(importlib.import_module(module_name), attr)
    if callable(obj) and not isinstance(obj, Topology):
        obj = obj()
    if not isinstance(obj, Topology):
        raise SystemExit(f"{ref} is not a Topology (got {type(obj).__name__})")
    return obj


def load_config(path: str | None, app_id: str) -> StreamsConfig:
    if path is None:
        return StreamsConfig(application_id=app_id)
    with open(path, "rb") as f:
        data = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    data.setdefault("application_id", app_id)
    return StreamsConfig.from_mapping(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kspark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo app on the embedded server")
    demo.add_argument("--payments", type=int, default=2000, help="payments per run")
    demo.add_argument("--remote", help="sc://host:port of a Spark Connect server")
    demo.add_argument("--data-dir", help="where to write data (default: a temp dir)")
    demo.add_argument(
        "--kafka", action="store_true",
        help="go through Kafka: start a local Kafka-protocol broker (tansu) and use kspark's Kafka source and sink",
    )
    desc = sub.add_parser("describe", help="print a topology")
    desc.add_argument("topology", help="module:attr")
    desc.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    run = sub.add_parser("run", help="run a topology until caught up")
    run.add_argument("topology", help="module:attr")
    run.add_argument("--remote", help="sc://host:port (default: embedded server)")
    run.add_argument("--config", help="a JSON or TOML file of StreamsConfig options")
    run.add_argument("--app-id", default="kspark-app")
    resc = sub.add_parser(
        "rescale", help="move a stopped app's state to a new number of partitions"
    )
    resc.add_argument("--app", required=True, help="module:attr of the app's topology")
    resc.add_argument("--partitions", type=int, required=True, help="the new num_partitions")
    resc.add_argument("--remote", help="sc://host:port (default: embedded server)")
    resc.add_argument("--config", help="a JSON or TOML file of StreamsConfig options")
    resc.add_argument("--app-id", default="kspark-app")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from kspark.demo import run_demo

            run_demo(payments=args.payments, remote=args.remote, data_dir=args.data_dir, kafka=args.kafka)
        elif args.command == "describe":
            topo = load_topology(args.topology)
            print({"text": topo.describe, "mermaid": topo.to_mermaid, "dot": topo.to_dot}[args.format]())
        elif args.command == "run":
            from kspark.runtime import StreamsApp, connect

            topo = load_topology(args.topology)
            app = StreamsApp(topo, load_config(args.config, args.app_id), session=connect(args.remote))
            print(app.run_until_caught_up().summary())
        elif args.command == "rescale":
            from kspark.runtime import StreamsApp, connect

            topo = load_topology(args.app)
            app = StreamsApp(topo, load_config(args.config, args.app_id), session=connect(args.remote))
            app.rescale(args.partitions, progress=True)  # prints the phases and the summary
            print(f"run the app with num_partitions={args.partitions} from now on")
    except KSparkError as exc:
        print(f"kspark: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
