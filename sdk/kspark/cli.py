"""The ``kspark`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
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


def load_config(path: str | None, app_id: str, *, override: bool = False) -> StreamsConfig:
    """A StreamsConfig from a JSON or TOML file; ``app_id`` is the default application id,
    or, with ``override``, replaces the file's."""
    if path is None:
        return StreamsConfig(application_id=app_id)
    with open(path, "rb") as f:
        data = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    if override:
        data["application_id"] = app_id
    data.setdefault("application_id", app_id)
    return StreamsConfig.from_mapping(data)


def _add_app_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app-id", help="the app's application_id (its handle is looked up)")
    parser.add_argument(
        "--remote",
        help="sc://host:port of the server, with ;token=... if needed "
        "(default: the URL in the app's handle, which holds no token)",
    )
    parser.add_argument("--handle", help="a handle file written by kspark submit")
    parser.add_argument(
        "--session-id", help="the app's Spark Connect session id, for an app submitted elsewhere"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _app_target(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "app_id": args.app_id,
        "remote": args.remote,
        "handle": args.handle,
        "session_id": args.session_id,
    }


def _show(obj: Any, as_json: bool) -> None:
    print(json.dumps(obj.to_dict(), indent=2) if as_json else obj.summary(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kspark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo app on the embedded server")
    demo.add_argument("--payments", type=int, default=2000, help="payments per run")
    demo.add_argument("--remote", help="sc://host:port of a Spark Connect server")
    demo.add_argument("--data-dir", help="where to write data (default: a temp dir)")
    demo.add_argument(
        "--kafka",
        action="store_true",
        help="go through Kafka: start a local Kafka-protocol broker (tansu) and use kspark's Kafka source and sink",
    )
    desc = sub.add_parser("describe", help="print a topology")
    desc.add_argument("topology", help="module:attr")
    desc.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    run = sub.add_parser("run", help="run a topology until caught up")
    run.add_argument("topology", help="module:attr")
    run.add_argument("--remote", help="sc://host:port (default: embedded server)")
    run.add_argument(
        "--config", help="a JSON or TOML file of StreamsConfig options (handlers by name)"
    )
    run.add_argument("--app-id", default="kspark-app")
    resc = sub.add_parser(
        "rescale", help="move a stopped app's state to a new number of partitions"
    )
    resc.add_argument("--app", required=True, help="module:attr of the app's topology")
    resc.add_argument("--partitions", type=int, required=True, help="the new num_partitions")
    resc.add_argument("--remote", help="sc://host:port (default: embedded server)")
    resc.add_argument("--config", help="a JSON or TOML file of StreamsConfig options")
    resc.add_argument("--app-id", default="kspark-app")
    submit = sub.add_parser(
        "submit", help="start a topology on a remote Spark Connect server and leave it running"
    )
    submit.add_argument("topology", help="module:attr")
    submit.add_argument("--remote", required=True, help="sc://host:port[/;token=...]")
    submit.add_argument(
        "--config", help="a JSON or TOML file of StreamsConfig options (handlers by name)"
    )
    submit.add_argument("--app-id", help="application_id (default: the config's, else kspark-app)")
    submit.add_argument(
        "--wait",
        type=float,
        default=60.0,
        help="seconds to wait for the first micro-batch, to report a failed start (0: none)",
    )
    submit.add_argument("--json", action="store_true", help="print the handle as JSON")
    status = sub.add_parser("status", help="show a submitted app's state and progress")
    _add_app_arguments(status)
    status.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="repeat every SECONDS until the app stops (this also keeps its session alive)",
    )
    stop = sub.add_parser("stop", help="stop a submitted app and release its session")
    _add_app_arguments(stop)
    stop.add_argument(
        "--keep-session", action="store_true", help="do not release the Spark Connect session"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from kspark_demo import run_demo

            run_demo(
                payments=args.payments, remote=args.remote, data_dir=args.data_dir, kafka=args.kafka
            )
        elif args.command == "describe":
            topo = load_topology(args.topology)
            print(
                {"text": topo.describe, "mermaid": topo.to_mermaid, "dot": topo.to_dot}[
                    args.format
                ]()
            )
        elif args.command == "run":
            from kspark.runtime import StreamsApp, connect

            topo = load_topology(args.topology)
            app = StreamsApp(
                topo, load_config(args.config, args.app_id), session=connect(args.remote)
            )
            print(app.run_until_caught_up().summary())
        elif args.command == "rescale":
            from kspark.runtime import StreamsApp, connect

            topo = load_topology(args.app)
            app = StreamsApp(
                topo, load_config(args.config, args.app_id), session=connect(args.remote)
            )
            app.rescale(args.partitions, progress=True)  # prints the phases and the summary
            print(f"run the app with num_partitions={args.partitions} from now on")
        elif args.command == "submit":
            from kspark.runtime import submit as remote

            topo = load_topology(args.topology)
            config = load_config(
                args.config, args.app_id or "kspark-app", override=args.app_id is not None
            )
            handle = remote.submit(
                topo,
                config,
                args.remote,
                modules=[args.topology.split(":", 1)[0]],
                topology_ref=args.topology,
                wait=args.wait,
            )
            _show(handle, args.json)
        elif args.command == "status":
            from kspark.runtime import submit as remote

            while True:
                st = remote.status(**_app_target(args))
                _show(st, args.json)
                if not args.watch or not st.running:
                    break
                time.sleep(args.watch)  # a polling interval the user chose
                print()
        elif args.command == "stop":
            from kspark.runtime import submit as remote

            _show(
                remote.stop(**_app_target(args), release_session=not args.keep_session), args.json
            )
    except KSparkError as exc:
        print(f"kspark: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not type(exc).__module__.startswith(("pyspark.", "grpc")):
            raise
        # a failure from the server that kspark did not translate: its root cause, and the
        # full trace in a log, rather than a traceback that ends mid-message
        from kspark.runtime.failures import summarize

        print(f"kspark: {summarize(exc, args.command)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
