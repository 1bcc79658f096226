"""Every command's argument errors are one line and a --help hint, exit status 2 (core.command)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ActorsConfig
from pipeline.config.flags import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("pipeline.launch", "pipeline.evaluate", "pipeline.replay", "pipeline.plot", "pipeline.export",
            "monitoring.overlap", "monitoring.grafana.dashboard")
MISTAKES = (["--bogus"], ["--bogus", "1", "--also-bogus"], ["--help-me"])


def _one_line_hint(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and lines[0].endswith(f"(python -m {command} --help lists the options)")
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("argv", MISTAKES)
def test_an_unknown_option_is_one_line_and_exit_2(command, argv, capsys):
    main = importlib.import_module(command).main
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    line = _one_line_hint(captured.err, command)
    # A command with a required argument names that first.
    assert f"unrecognized arguments: {argv[0]}" in line or "arguments are required" in line
    assert "usage:" not in captured.out + captured.err


@pytest.mark.parametrize(("argv", "wanted"), [
    (["--actors", "x"], "argument --actors: invalid int value: 'x'"),
    (["--ring", "gpu"], "argument --ring: invalid choice: 'gpu'"),
    (["--set"], "argument --set: expected one argument"),
    (["--env-kwargs", "[" * 5000], "argument --env-kwargs: lists and tables nested 5000 deep (at most 32)"),
    (["--env-kwargs", "3"], "argument --env-kwargs: expected a JSON object or a TOML inline table, got '3'"),
])
def test_the_launchers_malformed_values_are_one_line(argv, wanted, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert wanted in _one_line_hint(capsys.readouterr().err, "pipeline.launch")


def test_help_still_prints_the_whole_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--opponent OPPONENT" in out
    # The help names the default the config really has.
    assert ActorsConfig.opponent == "league" and "opponent: league (the default:" in out


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_as_a_process(command):
    done = subprocess.run([sys.executable, "-m", command, "--bogus"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    line = _one_line_hint(done.stderr, command)
    assert "unrecognized arguments: --bogus" in line or "arguments are required" in line
