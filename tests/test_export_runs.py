"""``python -m pipeline.export`` on real training runs, each step its own process as a user runs
it: ``pipeline.launch`` trains (the air-combat sim against ``crank``, CartPole), the export
writes ONNX and TorchScript from the run directory, and both act as the run's PyTorch policy on
observations recorded by flying it."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from export_parity import assert_acts_as, fly_gym_policy, fly_sim_policy

from learner.checkpoint import load_policy
from sim import SimConfig

ort = pytest.importorskip("onnxruntime", reason="the parity checks run the ONNX file with onnxruntime "
                                                "(the test extra)")
pytest.importorskip("onnx", reason="writing ONNX needs the onnx package (the export extra)")

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ["--device", "cpu", "--display", "plain", "--metrics-port", "-1", "--actors", "1", "--sync",
          "--set", "run.eval_episodes=2"]


def _command(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _train_and_export(run: Path, *options: str) -> tuple[Path, Path]:
    _command("pipeline.launch", *LAUNCH, *options, "--run-dir", str(run))
    out = _command("pipeline.export", str(run), "--onnx", str(run / "policy.onnx"),
                   "--torchscript", str(run / "policy.pt"))
    assert f"checkpoint {run / 'checkpoints' / 'latest.pt'}: policy version" in out
    return run / "policy.onnx", run / "policy.pt"


def _check_parity(onnx: Path, script: Path, run: Path, obs: torch.Tensor) -> None:
    policy = load_policy(run)
    action, second = ort.InferenceSession(str(onnx)).run(None, {"obs": obs.numpy()})
    assert_acts_as(policy, obs, action, second)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's, in favour of torch.export
        module = torch.jit.load(str(script))
    with torch.no_grad():
        t_action, t_second = module(obs)
    assert_acts_as(policy, obs, t_action.numpy(), t_second.numpy())


@pytest.mark.slow
def test_a_trained_sim_run_exports_and_acts_the_same_outside_pytorch(tmp_path):
    run = tmp_path / "sim"
    onnx, script = _train_and_export(run, "--opponent", "crank", "--envs-per-actor", "16",
                                     "--rollout-len", "32", "--total-steps", "4096")
    sidecar = json.loads(Path(f"{onnx}.json").read_text())
    assert (sidecar["env"], sidecar["agent_steps"]) == ("midrange", 4096)
    assert sidecar["observation"]["size"] == 81 and len(sidecar["observation"]["names"]) == 81
    _check_parity(onnx, script, run, fly_sim_policy(run, SimConfig(), num_envs=16, steps=25))


@pytest.mark.slow
def test_a_trained_cartpole_run_exports_and_acts_the_same_outside_pytorch(tmp_path):
    run = tmp_path / "cartpole"
    onnx, script = _train_and_export(run, "--env", "gym:CartPole-v1", "--total-steps", "4096")
    sidecar = json.loads(Path(f"{onnx}.json").read_text())
    assert (sidecar["env"], sidecar["agent_steps"]) == ("gym:CartPole-v1", 4096)
    _check_parity(onnx, script, run, fly_gym_policy(run, "CartPole-v1", steps=400))
