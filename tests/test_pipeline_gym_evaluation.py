"""A Gymnasium env that fails in the end-of-run evaluation: the evaluation's envs step in worker
processes, so a segfault or ``sys.exit`` there is one error line and exit 1, the training's
checkpoint and summary kept; ``pipeline.evaluate`` on such a run fails the same way."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import read_checkpoint, save_checkpoint
from pipeline.envs.choice import EnvFactory, probe
from pipeline.evaluation.gym import EvaluationError, evaluate_returns
from tests.envs_for_gym_runs import our_shared_segments

REPO = Path(__file__).resolve().parents[1]
FAILING_ENV = "tests.envs_for_gym_runs:FailsOnceFileExistsEnv"
BASE = ["--device", "cpu", "--display", "plain", "--metrics-port", "-1"]


def _checkpoint_for(env_kwargs: dict, directory: Path) -> Path:
    learner = PPOLearner(PPOConfig(hidden_sizes=(8,)), 2, ActionSpec.from_gym(probe(
        EnvFactory(FAILING_ENV, env_kwargs)).action_space), obs_layout={"env": FAILING_ENV, "size": 2})
    return save_checkpoint(directory, learner, {"config": {"actors": {"env_kwargs": env_kwargs}}})


@pytest.mark.parametrize(("mode", "what"), [("segv", "died"), ("exit", "died"),
                                            ("raise", "raised in step: ValueError")])
def test_an_env_that_fails_in_the_evaluation_is_one_error_and_no_worker_is_left(tmp_path, mode, what):
    trigger = tmp_path / "now"
    kwargs = {"trigger": str(trigger), "mode": mode}
    checkpoint = _checkpoint_for(kwargs, tmp_path / "run")
    assert evaluate_returns(checkpoint, EnvFactory(FAILING_ENV, kwargs), 4).episodes == 4
    trigger.touch()
    before = our_shared_segments()
    with pytest.raises(EvaluationError) as caught:
        evaluate_returns(checkpoint, EnvFactory(FAILING_ENV, kwargs), 4, workers=2)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"env {FAILING_ENV} failed during the evaluation after 0 of 4 episodes: ")
    assert what in message
    assert multiprocessing.active_children() == []
    assert our_shared_segments() <= before


def _launch(run_dir: Path, mode: str) -> subprocess.CompletedProcess[str]:
    kwargs = f'{{"trigger": "{run_dir / "checkpoints" / "latest.pt"}", "mode": "{mode}"}}'
    # The final checkpoint is the only one (the interval is longer than the run): the env fails
    # in the evaluation only.
    cmd = [sys.executable, "-m", "pipeline.launch", *BASE, "--actors", "1", "--env", FAILING_ENV,
           "--env-kwargs", kwargs, "--total-steps", "256", "--run-dir", str(run_dir),
           "--set", "run.eval_episodes=4", "--set", "run.checkpoint_interval_s=1000000"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["segv", "exit"])
def test_the_launcher_survives_an_env_that_crashes_in_the_evaluation(tmp_path, mode):
    run_dir = tmp_path / "run"
    done = _launch(run_dir, mode)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    out = done.stdout
    assert "finished in" in out and "samples: produced 256 = consumed 256" in out
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out
    assert errors[0].startswith(f"error: env {FAILING_ENV} failed during the evaluation after 0 of 4 episodes: ")
    assert "died" in errors[0] and errors[0].endswith("(the checkpoint above is kept)")
    assert f"checkpoint: {run_dir / 'checkpoints'}" in out
    assert read_checkpoint(run_dir / "checkpoints" / "latest.pt")["extra"]["agent_steps"] == 256
    assert (run_dir / "config.toml").is_file() and not (run_dir / ".lock").exists()
    # pipeline.evaluate on the run: the same failure, one line, exit 1 (a failure, not bad input).
    evaluated = subprocess.run([sys.executable, "-m", "pipeline.evaluate", "--agent", str(run_dir),
                                "--episodes", "4"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert evaluated.returncode == 1, evaluated.stdout + evaluated.stderr
    err = evaluated.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: env {FAILING_ENV} failed during the evaluation"), err
