"""pipeline.evaluate refuses bad input before it plays anything: damaged checkpoints, a device
this machine lacks, an unwritable --json path, a checkpoint of the other action mode; each is
one line on stderr and exit status 2. Results are written atomically."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ckpt_damage import DAMAGE, fill, tiny_filesystem

from core.files import write_json_atomic
from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import save_checkpoint
from pipeline.evaluate import main, run
from sim import SimConfig
from sim.layout import ObsLayout

ROOT = Path(__file__).resolve().parents[1]


def _save(directory: Path, sim_config: SimConfig | None = None) -> Path:
    layout = ObsLayout.from_config(SimConfig())
    learner = PPOLearner(PPOConfig(hidden_sizes=(8,)), layout.size, ActionSpec.for_sim(sim_config or SimConfig()),
                         obs_layout=layout.metadata())
    return save_checkpoint(directory, learner)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return _save(tmp_path_factory.mktemp("good") / "checkpoints")


def _refused(argv: list[str], capsys) -> str:
    """Run the command line; it must exit 2 with one line on stderr and nothing played."""
    with pytest.raises(SystemExit) as exited:
        run(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert out == ""  # refused before the first match
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: ")
    return err[len("error: "):-1]


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_agent_or_opponent_checkpoint_exits_2_with_one_line(kind, good, tmp_path, capsys):
    damage, message = DAMAGE[kind]
    bad = str(damage(good, tmp_path))
    for argv in (["--agent", bad, "--opponents", "straight"],
                 ["--agent", "straight", "--opponents", f"shooter,{bad}"],
                 ["--round-robin", f"straight,{bad}"]):
        line = _refused([*argv, "--episodes", "2"], capsys)
        assert re.fullmatch(message, line), line


def test_the_real_command_line_gives_no_traceback(good, tmp_path):
    bad = DAMAGE["truncated"][0](good, tmp_path)
    done = subprocess.run([sys.executable, "-m", "pipeline.evaluate", "--agent", str(bad), "--episodes", "2"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert re.fullmatch(r"error: checkpoint \S+truncated\.pt is truncated or corrupt \(a zip archive cut "
                        r"short at \d+ bytes\)\n", done.stderr), done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_exits_2(capsys):
    line = _refused(["--agent", "straight", "--device", "cuda", "--episodes", "2"], capsys)
    assert line == f"--device cuda: CUDA is not available on this machine (torch {torch.__version__})"
    assert _refused(["--agent", "straight", "--device", "gpu0", "--episodes", "2"], capsys) == (
        "--device 'gpu0' is not a device (cpu, cuda or cuda:N)")


def test_an_unwritable_json_path_is_refused_before_evaluating(tmp_path, capsys):
    argv = ["--agent", "straight", "--opponents", "shooter", "--episodes", "2"]
    assert _refused([*argv, "--json", str(tmp_path)], capsys) == f"--json {tmp_path} is a directory; give a file name"
    missing = tmp_path / "no" / "r.json"
    assert _refused([*argv, "--json", str(missing)], capsys) == (
        f"--json {missing}: the folder {missing.parent} does not exist")
    assert not missing.parent.exists()
    (tmp_path / "file").write_text("")
    assert _refused([*argv, "--json", str(tmp_path / "file" / "r.json")], capsys) == (
        f"--json {tmp_path / 'file' / 'r.json'}: the folder {tmp_path / 'file'} is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the write probe left nothing


def test_a_run_directory_is_evaluated_like_its_latest_checkpoint(tmp_path):
    _save(tmp_path / "run" / "checkpoints")
    argv = ["--opponents", "shooter", "--episodes", "4", "--seed", "2"]
    by_dir = main(["--agent", str(tmp_path / "run"), *argv])
    by_file = main(["--agent", str(tmp_path / "run" / "checkpoints" / "latest.pt"), *argv])
    assert by_dir["matches"][0] | {"agent": ""} == by_file["matches"][0] | {"agent": ""}
    assert by_dir["matches"][0]["episodes"] == 4


def test_a_checkpoint_of_the_other_action_mode_exits_2(tmp_path, capsys):
    path = _save(tmp_path / "cont", SimConfig(action_mode="continuous"))
    # Listed after a billion-episode match: refused before it, or this test would never end.
    line = _refused(["--agent", "straight", "--opponents", f"shooter,{path}", "--episodes", str(10**9)], capsys)
    assert line == (f"checkpoint {path} acts in action_mode 'continuous', "
                    "the simulator's action_mode is 'discrete'")


def test_results_json_on_a_full_disk_leaves_no_temporary_file(tmp_path):
    with tiny_filesystem(tmp_path / "fs") as fs:
        write_json_atomic(fs / "r.json", {"old": True})
        fill(fs, leave=0)
        with pytest.raises(OSError) as caught:
            write_json_atomic(fs / "r.json", {"matches": ["x" * 4096] * 64})
        assert caught.value.filename == str(fs / "r.json") and caught.value.strerror == "No space left on device"
        assert sorted(p.name for p in fs.iterdir()) == ["filler", "r.json"]
        assert json.loads((fs / "r.json").read_text()) == {"old": True}
