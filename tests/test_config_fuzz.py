"""Hostile configs: hundreds of seeded mutations of a run's own ``config.toml``, each either
refused with one line naming it (``ConfigError``, exit 2) or accepted exactly as meant, never a
traceback (issue 28, finding 1).

Every field of every section gets values of each kind: wrong types, huge, tiny, negative and
non-finite numbers, ``1e308`` and ``2**62``, strings with escapes, empty, long and nested lists;
then unknown keys and sections, ``--set`` values (deep nesting included), and config files that
are not files. The cases run in process through what ``pipeline.launch`` runs
(``resolve(parse_config(argv))``); a handful run as real ``python -m pipeline.launch`` processes
(slow tier). An accepted value must come back from the resolved config with its field's type and
value, and the config's own ``config.toml`` must resolve to the same config again.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import random
import subprocess
import sys
import threading
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from learner.ppo_config import PPOConfig
from pipeline.config import ConfigError, resolve
from pipeline.config.files import load_toml, to_toml
from pipeline.config.flags import parse_config
from pipeline.config.sections import PPO_DERIVED, SECTIONS
from pipeline.launch import config_text
from sim.config import AeroParams, SimConfig

ROOT = Path(__file__).resolve().parents[1]
SEED = 28
NAN, INF = float("nan"), float("inf")
NUMBERS: list[Any] = [0, -1, 1, 3, 2**31, 2**62, -(2**62), 10**30, 1e308, -1e308, 1e-308, 5e-324,
                      0.5, -0.5, NAN, INF, -INF]
BOOLS: list[Any] = [True, False, "false", "true", "no", "yes", 0, 1, 2, 0.5, ""]
TEXTS: list[Any] = ["", " ", 'quo"te', "back\\slash", "tab\tx", "line\nbreak", "nul\x00", "del\x7f",
                    "\u00e9\U0001f600", "x" * 5000, "[[[", "crank", "gym:CartPole-v1"]
LISTS: list[Any] = [[], [[1]], [["x"]], ["x"], [0], [1.0] * 1000, [NAN], [1e308], [2**62], [-1], [True],
                    ["crank", "crank"], [3, 3], [0.0, 1.0]]
WRONG: list[Any] = ["3", "1e308", "true", True, [], [1], {}, {"a": 1}, 3, 1.5]
SET_TEXTS = ["1e308", "nan", "-inf", "true", "false", "yes", "no", "True", '"3"', "'3'", "", "[1, [2, [3]]]",
             "[" * 5000 + "]" * 5000, "[" * 33 + "]" * 33, "{a = 1}", "x" * 70_000, '"\\u0000"', "2e-324"]


def _fields() -> list[tuple[tuple[str, ...], str, Any]]:
    """Every settable field: its table path, its name and its annotation."""
    found = []
    tables: list[tuple[tuple[str, ...], type]] = [((name,), cls) for name, cls in SECTIONS.items()]
    tables += [(("sim",), SimConfig), (("sim", "fighter"), AeroParams), (("sim", "missile"), AeroParams),
               (("ppo",), PPOConfig)]
    for path, cls in tables:
        for name, hint in typing.get_type_hints(cls).items():
            if dataclasses.is_dataclass(hint) or (path == ("ppo",) and name in PPO_DERIVED):
                continue
            found.append((path, name, hint))
    return found


def _kind(hint: Any) -> str:
    args = typing.get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    if hint in (int, float):
        return "number"
    if hint is bool:
        return "bool"
    if hint is str:
        return "text"
    return "table" if typing.get_origin(hint) is dict else "list"


MUST: dict[str, list[Any]] = {"number": [1e308, 2**62, NAN, "3", 1], "bool": ["false", 2, 0.5, False],
                              "text": ["line\nbreak", 'quo"te', 3], "list": [[], [[1]], [1.0] * 1000],
                              "table": [{"g": 9.8}, [1]]}
"""The values every field of a kind gets in the fast tier (the slow tier gives it all of them)."""


def _values(hint: Any, rng: random.Random, full: bool) -> list[Any]:
    """The mutations one field gets: its kind's (all of them, or in the fast tier the
    must-haves) and a seeded few of the other kinds'."""
    kind = _kind(hint)
    own = {"number": NUMBERS, "bool": BOOLS, "text": TEXTS, "list": LISTS,
           "table": [{}, {"g": 9.8}, {"a": {"b": 1}}, {"n": [1, 2]}, "x", [1]]}[kind]
    others = [v for v in NUMBERS + BOOLS + TEXTS + LISTS + WRONG if v not in own]
    if full:
        return own + rng.sample(others, 4)
    return MUST[kind] + rng.sample(others, 1)


def _meant(value: Any, hint: Any) -> Any:
    """What an accepted value must come back as: its field's type, its value."""
    args = typing.get_args(hint)
    if value is None or type(None) in args:
        hint = next((a for a in args if a is not type(None)), hint)
    if hint is float:
        return float(value)
    if typing.get_origin(hint) is tuple:
        item = args[0]
        return tuple(float(v) if item is float else v for v in value)
    return value


def _same(got: Any, want: Any) -> bool:
    if type(got) is not type(want):
        return False
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    return got == want


class Outcomes:
    """Each case's outcome by kind; what must never happen is collected with its case."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.counts: Counter[str] = Counter()
        self.tracebacks: list[str] = []
        self.silent: list[str] = []
        self.bad_messages: list[str] = []

    def run(self, case: str, argv: list[str], capsys: pytest.CaptureFixture[str],
            check: typing.Callable[[Any], str] | None = None, names: str = "") -> None:
        """``resolve(parse_config(argv))`` as ``pipeline.launch`` runs it; ``check`` returns
        what is wrong with an accepted config (empty: nothing); a refusal must name ``names``."""
        self.counts["cases"] += 1
        try:
            config = resolve(parse_config(argv))
        except ConfigError as exc:
            self.counts["refused"] += 1
            message = str(exc)
            if "\n" in message or not message or (names and names not in message):
                self.bad_messages.append(f"{case}: {message!r}")
            return
        except SystemExit as exc:  # an argparse refusal: one line on stderr, exit 2
            self.counts["refused"] += 1
            err = capsys.readouterr().err.strip().splitlines()
            if exc.code != 2 or len(err) != 1 or not err[0].startswith("error: "):
                self.bad_messages.append(f"{case}: exit {exc.code}, {err!r}")
            return
        except Exception as exc:  # the point: nothing else may escape
            self.tracebacks.append(f"{case}: {type(exc).__name__}: {exc}"[:300])
            return
        self.counts["accepted"] += 1
        wrong = check(config) if check is not None else ""
        if not wrong:
            again = self.tmp / "again.toml"
            again.write_text(config_text(config), encoding="utf-8")
            if resolve(load_toml(again)) != config:
                wrong = "its config.toml resolves to another config"
        if wrong:
            self.silent.append(f"{case}: {wrong}")


def _written_config(tmp: Path) -> tuple[Path, dict[str, Any]]:
    """A run's own config.toml, as ``pipeline.launch`` writes it, and its data."""
    path = tmp / "config.toml"
    path.write_text(config_text(resolve({"run": {"device": "cpu"}}, "cpu")), encoding="utf-8")
    return path, load_toml(path)


def _field_cases(outcomes: Outcomes, base: dict[str, Any], capsys: pytest.CaptureFixture[str],
                 full: bool) -> None:
    rng = random.Random(SEED)
    for path, name, hint in _fields():
        for value in _values(hint, rng, full):
            data = copy.deepcopy(base)
            table = data
            for part in path:
                table = table.setdefault(part, {})
            table[name] = value
            file = outcomes.tmp / "mutated.toml"
            file.write_text(to_toml(data), encoding="utf-8")
            key = ".".join((*path, name))

            def check(config: Any, path: tuple[str, ...] = path, name: str = name, value: Any = value,
                      hint: Any = hint) -> str:
                node = config
                for part in path:
                    node = getattr(node, part)
                got, want = getattr(node, name), _meant(value, hint)
                return "" if _same(got, want) else f"resolved to {got!r} ({type(got).__name__})"

            outcomes.run(f"{key} = {value!r}"[:120], ["--config", str(file)], capsys, check, name)


def _structure_cases(outcomes: Outcomes, base: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown keys and sections, tables that are not tables, a TOML nested 5000 deep."""
    mutations: list[tuple[str, Any, str]] = []
    for section in (*SECTIONS, "sim", "ppo"):
        mutations += [(section, ("bogus_key", 1), "bogus_key"), (section, ("", 1), section)]
    mutations += [("bogus", None, "bogus"), ("learner", None, "learner"), ("sim.fighter", ("wings", 2), "wings"),
                  ("run", 3, "run"), ("sim", [1], "sim"), ("ppo", "x", "ppo"), ("league", [], "league")]
    for where, change, names in mutations:
        data = copy.deepcopy(base)
        if change is None:
            data[where] = {"x": 1}
        elif isinstance(change, tuple):
            node = data
            for part in where.split("."):
                node = node[part]
            node[change[0]] = change[1]
        else:
            data[where] = change
        file = outcomes.tmp / "mutated.toml"
        text = to_toml(data) if not isinstance(data[where.split(".")[0]], (int, str, list)) else (
            to_toml({k: v for k, v in data.items() if k != where}) + f"\n{where} = {change!r}\n".replace("'", '"'))
        file.write_text(text, encoding="utf-8")
        outcomes.run(f"structure {where} {change!r}", ["--config", str(file)], capsys, None, names)
    deep = outcomes.tmp / "deep.toml"
    deep.write_text("[ppo]\ngamma = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    outcomes.run("a TOML list nested 5000 deep", ["--config", str(deep)], capsys, None, "nested")


def _set_cases(outcomes: Outcomes, config_path: Path, capsys: pytest.CaptureFixture[str],
               full: bool) -> None:
    rng = random.Random(SEED + 1)
    keys = [".".join((*p, n)) for p, n, _ in _fields()]
    chosen = sorted({"ppo.gamma", "ppo.normalize_obs", "run.sync", "run.total_steps", "sim.time_scale",
                     *rng.sample(keys, 16 if full else 1)})
    for key in chosen:
        for text in SET_TEXTS:
            outcomes.run(f"--set {key}={text[:40]!r}", ["--config", str(config_path), "--set", f"{key}={text}"],
                         capsys, lambda config: "", "")
    for argv in (["--env-kwargs", '{"g": 9.8}'], ["--env-kwargs", "[" * 5000], ["--set", "nodot=1"],
                 ["--set", "sim.fighter=3"], ["--set", "a" * 100], ["--total-steps", "1e308"]):
        outcomes.run(f"flags {argv!r}"[:120], ["--config", str(config_path), *argv], capsys, None, "")


def _file_cases(outcomes: Outcomes, capsys: pytest.CaptureFixture[str]) -> None:
    """Config files that are no config files: a device, a FIFO, a directory, 2 MiB, binary."""
    fifo = outcomes.tmp / "fifo.toml"
    os.mkfifo(fifo)
    big = outcomes.tmp / "big.toml"
    big.write_text("# x\n" * (1 << 19), encoding="utf-8")
    binary = outcomes.tmp / "binary.toml"
    binary.write_bytes(bytes(range(256)))
    for path, names in (("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                        (outcomes.tmp, "is a directory"), (big, "larger than 1 MiB"),
                        (binary, "not valid TOML"), (outcomes.tmp / "missing.toml", "no such file")):
        done = threading.Event()

        def attempt(path: object = path, names: str = names, done: threading.Event = done) -> None:
            outcomes.run(f"--config {path}", ["--config", str(path)], capsys, None, names)
            done.set()

        threading.Thread(target=attempt, daemon=True).start()
        assert done.wait(60), f"--config {path} did not return"  # a hang guard, not a timing


def _sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str], full: bool) -> Counter[str]:
    outcomes = Outcomes(tmp_path)
    config_path, base = _written_config(tmp_path)
    _field_cases(outcomes, base, capsys, full)
    _structure_cases(outcomes, base, capsys)
    _set_cases(outcomes, config_path, capsys, full)
    _file_cases(outcomes, capsys)
    counts = outcomes.counts
    print(f"config fuzz ({'full' if full else 'fast'}): {counts['cases']} cases, {counts['refused']} refused, "
          f"{counts['accepted']} accepted, {len(outcomes.tracebacks)} tracebacks, "
          f"{len(outcomes.silent)} silent coercions, {len(outcomes.bad_messages)} bad messages")
    assert outcomes.tracebacks == []
    assert outcomes.silent == []
    assert outcomes.bad_messages == []
    assert counts["refused"] + counts["accepted"] == counts["cases"]
    return counts


def test_hostile_configs_are_refused_in_one_line_or_kept_exactly(tmp_path, capsys):
    assert _sweep(tmp_path, capsys, full=False)["cases"] >= 600


@pytest.mark.slow
def test_every_mutation_of_every_field(tmp_path, capsys):
    assert _sweep(tmp_path, capsys, full=True)["cases"] >= 2500


def test_the_findings_own_cases(tmp_path):
    """The mutations issue 28 found, each refused by name."""
    cases = [
        ({"sim": {"time_scale": 1e308}}, "sim: time_scale must be in (0, 1000000000], got 1e+308"),
        ({"sim": {"fighter": {"lift_to_drag": 1e308}}}, "sim: fighter.lift_to_drag must be in [0.1, 1000]"),
        ({"sim": {"missiles_per_fighter": 2**62}}, "sim: missiles_per_fighter must be an integer in [1, 64]"),
        ({"run": {"total_steps": "3"}}, "run.total_steps must be an integer, got '3' (a string)"),
        ({"league": {"anchors": ["x"]}}, "league.anchors: unknown agent 'x': expected one of straight, pursuit, "
                                         "shooter, crank, random"),
        ({"ppo": {"normalize_obs": "false"}}, "ppo: normalize_obs must be true or false, got 'false' (a string)"),
        ({"run": {"sync": 0.5}}, "run.sync must be true or false, got 0.5 (a float)"),
        ({"ppo": {"update_epochs": 2**62}}, "ppo: update_epochs must be an integer in [1, 1000]"),
        ({"ppo": {"policy_bias": [0.0, -4.0]}}, "ppo.policy_bias has 2 values but the policy head has 8 outputs"),
        ({"ppo": {"entropy_weights": [1.0, 0.0]}}, "ppo.entropy_weights has 2 values but the sim's discrete "
                                                    "actions have 3 components"),
        ({"ppo": {"entropy_weights": [1, 1, -0.5]}}, "ppo: entropy_weights[2] must be in [0, 1000], got -0.5"),
        ({"actors": {"env_kwargs": {"g": 9.8}}}, "actors.env_kwargs (--env-kwargs) applies to a Gymnasium env only"),
        ({"run": {"run_dir": "a\x00b"}}, "run.run_dir must not hold control characters"),
        ({"actors": {"env": "gym:CartPole-v1"}, "ppo": {"mirror": True}},
         "ppo.mirror needs an env that says what its mirror image is (the air-combat sim does); "
         "gym:CartPole-v1 does not"),
        ({"ppo": {"mirror": "yes"}}, "ppo: mirror must be true or false, got 'yes' (a string)"),
    ]
    for data, message in cases:
        with pytest.raises(ConfigError) as exc:
            resolve(data, "cpu")
        assert message in str(exc.value), (data, str(exc.value))
    # An empty policy_bias is documented: zeros, no prior.
    assert resolve({"ppo": {"policy_bias": []}}, "cpu").ppo.policy_bias == ()
    with pytest.raises(ConfigError, match=r"--set ppo\.gamma: lists and tables nested 5000 deep \(at most 32\)"):
        parse_config(["--set", "ppo.gamma=" + "[" * 5000 + "]" * 5000])


@pytest.mark.slow
def test_the_launcher_refuses_them_as_a_process(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\ntotal_steps = "3"\n', encoding="utf-8")
    cases = [
        (["--set", "sim.time_scale=1e308"], "sim: time_scale must be in (0, 1000000000]"),
        (["--config", str(bad)], "run.total_steps must be an integer, got '3' (a string)"),
        (["--set", 'league.anchors=["x"]'], "league.anchors: unknown agent 'x'"),
        (["--set", "ppo.gamma=" + "[" * 5000 + "]" * 5000], "nested 5000 deep"),
        (["--config", "/dev/zero"], "--config: /dev/zero is not a regular file"),
        (["--env-kwargs", '{"g": 9.8}'], "applies to a Gymnasium env only"),
        (["--set", "ppo.normalize_obs=no"], "ppo: normalize_obs must be true or false, got 'no' (a string)"),
    ]
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.launch", "--run-dir", str(tmp_path / f"run{i}"),
                               "--display", "none", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i, (argv, _) in enumerate(cases)]
    for i, (proc, (argv, message)) in enumerate(zip(procs, cases, strict=True)):
        _, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert message in lines[0], (argv, lines[0])
        assert not (tmp_path / f"run{i}").exists()


def test_floats_and_tuples_come_back_as_declared():
    """The round-trip check's own check: an int for a float comes back a float, a list for a
    tuple a tuple; a bool is never taken for a number."""
    assert _same(_meant(3, float), 3.0) and not _same(3, 3.0)
    assert _same(_meant([1, 2], tuple[float, float]), (1.0, 2.0))
    assert not _same(True, 1) and math.isnan(_meant(NAN, float))
