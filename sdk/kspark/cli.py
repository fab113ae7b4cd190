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
from kspark.errors import ConfigError, KSparkError
from kspark.plan.topology import Topology
from kspark.runtime.server import REMOTE_ENV
from kspark.runtime.urls import redact

#: The top-level help: plain text, as argparse prints it.
DESCRIPTION = """\
kspark: the Kafka Streams DSL on Spark Structured Streaming over Spark Connect.

A topology is named module:attr (an attribute that is a Topology, or a function that
returns one), imported with the current folder on the path. Relative paths (--config,
--data-dir, and the paths in a config file) are taken against the current folder and
sent to the server as absolute paths."""


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


def _add_remote_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--remote",
        help="sc://host:port of the server, with ;token=... if needed (visible to other "
        f"users in the process list: prefer --remote-file or $KSPARK_REMOTE; default: {default})",
    )
    parser.add_argument(
        "--remote-file",
        metavar="FILE",
        help="a file that holds the sc:// URL, so that its token is not on the command line",
    )


def _remote(args: argparse.Namespace) -> str | None:
    """The server URL: ``--remote``, else the first line of ``--remote-file``, else
    ``$KSPARK_REMOTE``, else None."""
    if args.remote:
        return str(args.remote)
    if args.remote_file:
        try:
            with open(args.remote_file) as f:
                url = f.readline().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read --remote-file {args.remote_file}: {exc.strerror}",
                option="remote_file",
            ) from None
        if not url:
            raise ConfigError(f"--remote-file {args.remote_file} is empty", option="remote_file")
        return url
    return os.environ.get(REMOTE_ENV, "").strip() or None


def _add_app_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app-id", help="the app's application_id (its handle is looked up)")
    _add_remote_arguments(
        parser, "$KSPARK_REMOTE, else the URL in the app's handle, which holds no token"
    )
    parser.add_argument("--handle", help="a handle file written by kspark submit")
    parser.add_argument(
        "--session-id", help="the app's Spark Connect session id, for an app submitted elsewhere"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _app_target(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "app_id": args.app_id,
        "remote": _remote(args),
        "handle": args.handle,
        "session_id": args.session_id,
    }


def _show(obj: Any, as_json: bool) -> None:
    print(json.dumps(obj.to_dict(), indent=2) if as_json else obj.summary(), flush=True)


def _add_server_parser(sub: Any) -> None:
    server = sub.add_parser(
        "server",
        help="start, stop or show a standalone Spark Connect server (Spark's sbin scripts)",
    )
    actions = server.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start a Spark Connect server and print its URL")
    start.add_argument(
        "--master",
        default="local[2]",
        help="local[N], local-cluster[workers,cores,MiB] or spark://host:port (default local[2])",
    )
    start.add_argument("--port", type=int, default=15002, help="Spark Connect port (15002)")
    start.add_argument(
        "--worker-python",
        metavar="PYTHON",
        help="the Python of the server's workers (default: this Python). It needs no "
        f"kspark, but these packages: {_worker_packages()}",
    )
    start.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default loopback)"
    )
    start.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    start.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it")
    status = actions.add_parser("status", help="say whether the server runs, and its URL")
    status.add_argument(
        "--url", action="store_true", help="print only the URL, token included (for scripts)"
    )
    status.add_argument("--json", action="store_true", help="print JSON")
    actions.add_parser("stop", help="stop the server (Spark's stop-connect-server.sh)")


def _worker_packages() -> str:
    """The distributions a server's workers need, as the worker check asks for them."""
    from kspark.runtime import workers

    base = ", ".join(need.distribution for need in workers.BASE)
    stateful = " and ".join(need.distribution for need in workers.STATEFUL)
    kafka = " and ".join(need.distribution for need in workers.KAFKA)
    return (
        f"{base}; {stateful} for stateful operators; {kafka} for Kafka through "
        "kspark's Python client"
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"kspark {version('kspark')}"
    except PackageNotFoundError:
        return "kspark (version unknown: not installed as a distribution)"


def _server(args: argparse.Namespace) -> int:
    from kspark.runtime import standalone

    if args.action == "start":
        conf = dict(item.split("=", 1) for item in args.conf if "=" in item)
        bad = [item for item in args.conf if "=" not in item]
        if bad:
            raise SystemExit(f"--conf takes KEY=VALUE, got {bad[0]!r}")
        state = standalone.start(
            master=args.master,
            port=args.port,
            worker_python=args.worker_python,
            host=args.host,
            conf=conf,
            timeout=args.timeout,
        )
        url = state.url(with_token=True)
        print(
            f"Spark Connect server running (pid {state.pid}, master {state.master}, worker "
            f"Python {state.worker_python})\nlogs: {state.log_dir}\nconnect with:\n  {url}\n"
            f"  export KSPARK_REMOTE='{url}'\nstop with: kspark server stop",
            flush=True,
        )
        return 0
    if args.action == "stop":
        stopped = standalone.stop()
        print(
            f"stopped the Spark Connect server (pid {stopped.pid})"
            if stopped
            else "no Spark Connect server started by kspark runs"
        )
        return 0
    current = standalone.status()
    if args.url:
        if current is not None:
            print(current.url(with_token=True))
    elif args.json:
        print(json.dumps(standalone.describe(current), indent=2))
    elif current is None:
        print("no Spark Connect server started by kspark runs")
    else:
        print(
            f"running: {current.url(with_token=False)} (pid {current.pid}, master "
            f"{current.master}, worker Python {current.worker_python}, logs {current.log_dir})"
        )
    return 0 if current is not None else 1


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``kspark`` command line."""
    parser = argparse.ArgumentParser(
        prog="kspark",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the demo app on the embedded server")
    demo.add_argument("--payments", type=int, default=2000, help="payments per run")
    demo.add_argument("--remote", help="sc://host:port of a Spark Connect server")
    demo.add_argument(
        "--data-dir",
        help="where to write the data and read the results back (relative: against the "
        "current folder; default: a temporary folder, removed afterwards)",
    )
    demo.add_argument(
        "--kafka",
        action="store_true",
        help="go through Kafka: start a local Kafka-protocol broker (tansu) and use kspark's Kafka source and sink",
    )
    desc = sub.add_parser("describe", help="print a topology")
    desc.add_argument("topology", help="module:attr")
    desc.add_argument(
        "--format",
        choices=["text", "mermaid", "dot"],
        default="text",
        help="text (Kafka Streams' describe() layout, the default), a Mermaid flowchart or "
        "Graphviz DOT",
    )
    run = sub.add_parser("run", help="run a topology until caught up")
    run.add_argument("topology", help="module:attr")
    resc = sub.add_parser(
        "rescale", help="move a stopped app's state to a new number of partitions"
    )
    resc.add_argument("topology", nargs="?", help="module:attr of the app's topology")
    # the form of earlier releases, kept working
    resc.add_argument("--app", help=argparse.SUPPRESS)
    resc.add_argument("--partitions", type=int, required=True, help="the new num_partitions")
    for p, what in ((run, "runs"), (resc, "rescales")):
        _add_remote_arguments(p, "$KSPARK_REMOTE, else an embedded server")
        p.add_argument(
            "--config", help="a JSON or TOML file of StreamsConfig options (handlers by name)"
        )
        p.add_argument(
            "--app-id",
            default="kspark-app",
            help=f"the application_id of the app it {what}, the default of a config file "
            "that sets none (default: kspark-app); the checkpoint is found by it",
        )
    submit = sub.add_parser(
        "submit", help="start a topology on a remote Spark Connect server and leave it running"
    )
    submit.add_argument("topology", help="module:attr")
    _add_remote_arguments(submit, "$KSPARK_REMOTE; one of the three is required")
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
    clean = sub.add_parser(
        "clean-up",
        help="delete an app's local stores (the next run rebuilds them from the checkpoint)",
    )
    clean.add_argument("app_id", metavar="APP_ID", help="the application_id")
    clean.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the app's state_dir, if it has one (the default roots are always looked at)",
    )
    _add_server_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "server":
            return _server(args)
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
        elif args.command in ("run", "rescale"):
            from kspark.runtime import StreamsApp, connect

            ref = args.topology or (args.app if args.command == "rescale" else None)
            if ref is None or (args.command == "rescale" and args.topology and args.app):
                parser.error("rescale takes the app's topology once, as module:attr")
            app = StreamsApp(
                load_topology(ref),
                load_config(args.config, args.app_id),
                session=connect(_remote(args)),
            )
            if args.command == "run":
                print(app.run_until_caught_up().summary())
            else:
                app.rescale(args.partitions, progress=True)  # prints the phases and summary
                print(f"run the app with num_partitions={args.partitions} from now on")
        elif args.command == "submit":
            from kspark.runtime import submit as remote

            remote_url = _remote(args)
            if remote_url is None:
                raise ConfigError(
                    "kspark submit needs the server: --remote, --remote-file or $KSPARK_REMOTE",
                    option="remote",
                )
            topo = load_topology(args.topology)
            config = load_config(
                args.config, args.app_id or "kspark-app", override=args.app_id is not None
            )
            handle = remote.submit(
                topo,
                config,
                remote_url,
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
        elif args.command == "clean-up":
            from kspark.runtime import localstate

            print(localstate.clean_up(args.app_id, args.state_dir).summary())
        elif args.command == "stop":
            from kspark.runtime import submit as remote

            _show(
                remote.stop(**_app_target(args), release_session=not args.keep_session), args.json
            )
    except KSparkError as exc:
        print(f"kspark: {redact(str(exc))}", file=sys.stderr)
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
