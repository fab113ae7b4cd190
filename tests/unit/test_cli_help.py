"""The command line's own surface: its version, its help texts and its arguments (no
server: only parsing and help)."""

from __future__ import annotations

import argparse
import importlib.metadata

import attrs
import pytest

from kspark.cli import build_parser, main
from kspark.runtime.app import State
from kspark.runtime.app_status import AppStatus


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"kspark {importlib.metadata.version('kspark')}"


def test_the_top_level_help_is_plain_text() -> None:
    text = build_parser().format_help()
    assert "``" not in text and ":func:" not in text
    for command in ("demo", "describe", "run", "rescale", "submit", "status", "stop", "server"):
        assert f"\n    {command} " in text


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("describe", "--format"),
        ("run", "--app-id"),
        ("rescale", "--app-id"),
        ("run", "--remote-file"),
    ],
)
def test_every_option_has_help(command: str, option: str) -> None:
    (action,) = [a for a in _subparser(command)._actions if option in a.option_strings]
    assert action.help


def test_every_visible_option_of_every_command_has_help() -> None:
    for name in ("demo", "describe", "run", "rescale", "submit", "status", "stop"):
        for action in _subparser(name)._actions:
            assert action.help, (name, action.option_strings or action.dest)


def test_rescale_takes_the_app_positionally_and_the_old_option_still_works() -> None:
    args = build_parser().parse_args(["rescale", "m:topology", "--partitions", "4"])
    assert (args.topology, args.partitions) == ("m:topology", 4)
    old = build_parser().parse_args(["rescale", "--app", "m:topology", "--partitions", "4"])
    assert (old.topology, old.app) == (None, "m:topology")
    assert "--app " not in _subparser("rescale").format_help()


def test_rescale_without_an_app_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["rescale", "--partitions", "4"])
    assert exit_.value.code == 2
    assert "module:attr" in capsys.readouterr().err


def test_run_takes_the_url_from_a_file() -> None:
    args = build_parser().parse_args(["run", "m:t", "--remote-file", "url.txt"])
    assert args.remote_file == "url.txt"


def test_the_worker_python_help_names_every_package_the_workers_need() -> None:
    server = _subparser("server")
    (sub,) = [a for a in server._actions if isinstance(a, argparse._SubParsersAction)]
    text = " ".join(sub.choices["start"].format_help().split())
    for package in ("pyarrow", "pandas", "numpy", "grpcio", "msgspec", "lmdb", "confluent-kafka"):
        assert package in text


def test_a_stop_says_what_it_stopped() -> None:
    status = AppStatus(
        app_id="payments",
        state=State.NOT_RUNNING,
        message="the query was stopped",
        query_id="q-1",
        last_batch_id=41,
        stopped=True,
    )
    assert status.summary().splitlines()[0] == "stopped app payments: query q-1, last batch 41"
    assert AppStatus.from_dict(status.to_dict()) == status
    assert "stopped app" not in attrs.evolve(status, stopped=False).summary()
