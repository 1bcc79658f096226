"""``python -m pipeline.export``: the exported ONNX and TorchScript files act as the PyTorch
policy does on observations recorded by flying it (the sim, discrete and continuous, and
CartPole), their sidecar says what goes in and comes out, the documented onnxruntime example
runs, and bad input is one line with nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from ckpt_damage import DAMAGE, fill, tiny_filesystem
from export_parity import (
    assert_acts_as,
    fly_gym_policy,
    fly_sim_policy,
    gym_checkpoint,
    raw_actions,
    sim_checkpoint,
)

from learner.checkpoint import load_policy
from pipeline.export import main, run
from sim import SimConfig
from sim.actions import RUDDER_LEVELS, THROTTLE_LEVELS, ActionChecker
from sim.layout import ObsLayout

ort = pytest.importorskip("onnxruntime", reason="the parity checks run the ONNX file with onnxruntime "
                                                "(the test extra)")
pytest.importorskip("onnx", reason="writing ONNX needs the onnx package (the export extra)")

ROOT = Path(__file__).resolve().parent.parent


class Checkpoints(dict[str, Path]):
    """Checkpoints folders by kind (the sim's ``discrete`` and ``continuous`` policies,
    ``cartpole``), each made the first time a test asks for it."""

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, kind: str) -> Path:
        where = self.base / kind
        if kind == "cartpole":
            made = gym_checkpoint(where)
        elif kind == "mirrored":
            made = sim_checkpoint(where, SimConfig(), mirror=True)
        else:
            made = sim_checkpoint(where, SimConfig(action_mode=kind))
        self[kind] = made
        return made


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("checkpoints"))


def _export(checkpoint: Path, out: Path) -> tuple[Path, Path]:
    out.mkdir(exist_ok=True)
    written = main([str(checkpoint), "--onnx", str(out / "policy.onnx"), "--torchscript", str(out / "policy.pt")])
    return written["--onnx"], written["--torchscript"]


def _outputs_of_both(onnx: Path, script: Path, obs: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """(action, second output) of the ONNX file run by onnxruntime and of the TorchScript file
    loaded by torch.jit.load."""
    session = ort.InferenceSession(str(onnx))
    assert [i.name for i in session.get_inputs()] == ["obs"]
    action, second = session.run(None, {"obs": obs.numpy()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's, in favour of torch.export
        module = torch.jit.load(str(script))
    with torch.no_grad():
        t_action, t_second = module(obs)
    return [(action, second), (t_action.numpy(), t_second.numpy())]


@pytest.mark.parametrize("mode", ["discrete", "continuous"])
def test_a_sim_policy_exported_acts_as_the_pytorch_policy(checkpoints, tmp_path, mode):
    sim = SimConfig(action_mode=mode)
    onnx, script = _export(checkpoints[mode], tmp_path)
    obs = fly_sim_policy(checkpoints[mode], sim)  # 400 observations: both sides, 25 decisions
    policy = load_policy(checkpoints[mode])
    for action, second in _outputs_of_both(onnx, script, obs):
        assert_acts_as(policy, obs, action, second)
    expected, _, _ = policy.act(obs, deterministic=True)
    # The observations are ones where the normalization decides: fed raw, the head would act
    # otherwise, and many of them lie beyond the clip of the normalized range.
    if mode == "discrete":
        assert (raw_actions(policy, obs) != expected).any(-1).float().mean() > 0.2
        assert all(len(set(column.tolist())) == n for column, n in zip(expected.T, (3, 3, 2), strict=True))
    else:
        assert (raw_actions(policy, obs) - expected).abs().mean() > 0.1
    normalized = (obs - policy.obs_norm.mean) * torch.rsqrt(policy.obs_norm.var + policy.obs_norm.eps)
    assert (normalized.abs() > policy.obs_norm.clip).any(-1).float().mean() > 0.1


def test_a_mirrored_sim_policy_exported_acts_as_the_pytorch_policy(checkpoints, tmp_path):
    onnx, script = _export(checkpoints["mirrored"], tmp_path)
    obs = fly_sim_policy(checkpoints["mirrored"], SimConfig())
    policy = load_policy(checkpoints["mirrored"])
    assert policy.mirror is not None
    for action, second in _outputs_of_both(onnx, script, obs):
        assert_acts_as(policy, obs, action, second)
    # The mirror matters on these observations: the head alone would act otherwise.
    with torch.no_grad():
        rudder_alone = policy.actor(policy._features(obs)).float()[:, :3].argmax(-1)
    expected, _, _ = policy.act(obs, deterministic=True)
    assert (rudder_alone != expected[:, 0]).float().mean() > 0.05


@pytest.mark.parametrize(("env_id", "ppo"), [
    ("CartPole-v1", {}), ("CartPole-v1", {"obs_norm_clip": 0.5}), ("CartPole-v1", {"normalize_obs": False}),
    ("Pendulum-v1", {}),
], ids=["cartpole", "cartpole-clipped-tight", "cartpole-not-normalized", "pendulum"])
def test_a_gym_policy_exported_acts_as_the_pytorch_policy(tmp_path, env_id, ppo):
    checkpoint = gym_checkpoint(tmp_path / "checkpoints", env_id, **ppo)
    onnx, script = _export(checkpoint, tmp_path / "out")
    obs = fly_gym_policy(checkpoint, env_id, steps=300)
    policy = load_policy(checkpoint)
    for action, second in _outputs_of_both(onnx, script, obs):
        assert_acts_as(policy, obs, action, second)
    expected, _, _ = policy.act(obs, deterministic=True)
    raw = raw_actions(policy, obs)
    differs = (raw != expected).float().mean() if policy.action_spec.is_discrete else (raw - expected).abs().mean()
    if policy.action_spec.is_discrete:
        assert set(expected[:, 0].tolist()) == {0, 1}
    normalization = json.loads(Path(f"{onnx}.json").read_text())["inputs"]["obs"]["normalization"]
    if ppo.get("normalize_obs", True):
        assert differs > 0.1
        clip = ppo.get("obs_norm_clip", 10.0)
        assert normalization == (f"in the graph: (obs - mean) / sqrt(var + 1e-08), clipped to ±{clip:g}, "
                                 "with the checkpoint's statistics over 500 observations")
    else:
        assert differs == 0 and normalization == "none"


def test_the_sidecar_describes_the_observation_and_the_actions(checkpoints, tmp_path):
    onnx, script = _export(checkpoints["discrete"], tmp_path / "discrete")
    sidecar = json.loads(Path(f"{onnx}.json").read_text())
    assert sidecar["file"] == "policy.onnx" and sidecar["file_format"] == "onnx" and sidecar["onnx_opset"] == 17
    assert sidecar["checkpoint"] == str(checkpoints["discrete"] / "latest.pt")
    assert (sidecar["policy_version"], sidecar["agent_steps"], sidecar["env"]) == (7, 4096, "midrange")
    layout = ObsLayout.from_config(SimConfig())
    assert sidecar["observation"]["names"] == list(layout.names)
    assert sidecar["observation"]["size"] == layout.size == 81
    assert sidecar["inputs"]["obs"] | {"normalization": None} == {
        "shape": ["N", 81], "dtype": "float32", "what": "raw observations, as the env gives them",
        "normalization": None}
    assert sidecar["outputs"]["action"]["shape"] == ["N", 3] and sidecar["outputs"]["logits"]["shape"] == ["N", 8]
    assert json.loads(Path(f"{script}.json").read_text())["file_format"] == "torchscript"
    # Decoding an action by the sidecar gives what the simulator makes of it.
    components = sidecar["action"]["components"]
    assert [c["name"] for c in components] == ["rudder", "throttle", "fire"]
    actions = torch.cartesian_prod(torch.arange(3), torch.arange(3), torch.arange(2))
    rudder, throttle, fire = ActionChecker(torch.device("cpu")).discrete(actions)
    by_sidecar = [[c["index_to_value"][int(i)] for i in column] for c, column in zip(components, actions.T, strict=True)]
    assert by_sidecar == [rudder.float().tolist(), throttle.tolist(), fire.tolist()]

    onnx, _ = _export(checkpoints["continuous"], tmp_path / "continuous")
    sidecar = json.loads(Path(f"{onnx}.json").read_text())
    assert sidecar["action"]["kind"] == "continuous" and "std" in sidecar["outputs"]
    assert [(c["name"], c["low"], c["high"]) for c in sidecar["action"]["components"]] == [
        ("rudder", -1.0, 1.0), ("throttle", 0.0, 1.0), ("fire", 0.0, 1.0)]

    onnx, _ = _export(checkpoints["cartpole"], tmp_path / "cartpole")
    sidecar = json.loads(Path(f"{onnx}.json").read_text())
    assert (sidecar["env"], sidecar["env_kwargs"], sidecar["agent_steps"]) == ("gym:CartPole-v1", {}, 2048)
    assert sidecar["observation"] == {"size": 4, "names": None,
                                      "order": "the observation vector of gym:CartPole-v1, flattened"}
    assert sidecar["action"]["components"] == [{"name": "action[0]", "choices": 2}]


def _documented_example() -> str:
    text = (ROOT / "docs" / "export.md").read_text()
    section = text.split("## Running it with onnxruntime", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "docs/export.md has no onnxruntime example"
    return found.group(1)


def test_the_documented_onnxruntime_example_runs(checkpoints, tmp_path):
    _export(checkpoints["discrete"], tmp_path)
    code = _documented_example()
    assert 8 <= len(code.strip().splitlines()) <= 14
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    policy = load_policy(checkpoints["discrete"])
    action, _, _ = policy.act(torch.zeros(4, policy.obs_dim), deterministic=True)
    levels = (RUDDER_LEVELS, THROTTLE_LEVELS, (False, True))
    expected = [f"{name} {[values[int(i)] for i in column]}"
                for name, values, column in zip(("rudder", "throttle", "fire"), levels, action.T, strict=True)]
    assert done.stdout.splitlines() == expected


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_one_line_and_nothing_is_written(checkpoints, tmp_path, capsys, damage):
    make, message = DAMAGE[damage]
    bad = make(checkpoints["discrete"] / "latest.pt", tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    line = _error_line(capsys, [str(bad), "--onnx", str(out / "p.onnx"), "--torchscript", str(out / "p.pt")])
    assert re.search(message, line), line
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(("outputs", "message"), [
    ([], "nothing to write: give --onnx OUT and/or --torchscript OUT"),
    (["--onnx", "missing/p.onnx"], r"--onnx \S+missing/p\.onnx: the folder \S+missing does not exist"),
    (["--onnx", "."], r"--onnx \S+ is a directory; give a file name"),
    (["--torchscript", "CKPT"], r"^error: --torchscript (\S+latest\.pt) would overwrite the checkpoint \1; "
                                r"give another file name$"),
    (["--onnx", "p.bin", "--torchscript", "p.bin"],
     r"--torchscript \S+p\.bin would overwrite the --onnx output; give another file name"),
    (["--onnx", "p.onnx", "--torchscript", "p.onnx.json"],
     r"--torchscript \S+p\.onnx\.json would overwrite the sidecar of --onnx; give another file name"),
])
def test_bad_outputs_are_refused_before_anything_is_written(checkpoints, tmp_path, capsys, outputs, message):
    ckpt = checkpoints["cartpole"] / "latest.pt"
    argv = [str(ckpt)] + [str(ckpt) if o == "CKPT" else o if o.startswith("--") else str(tmp_path / o)
                          for o in outputs]
    before = sorted(p.name for p in checkpoints["cartpole"].iterdir())
    line = _error_line(capsys, argv)
    assert re.search(message, line), line
    assert list(tmp_path.iterdir()) == []
    assert sorted(p.name for p in checkpoints["cartpole"].iterdir()) == before


def test_without_onnx_the_command_names_the_extra(checkpoints, tmp_path):
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from pipeline.export import run\n"
            f"run([{str(checkpoints['cartpole'])!r}, '--onnx', {str(tmp_path / 'p.onnx')!r}])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == ("error: --onnx needs the Python package 'onnx': "
                           "pip install 'midrange-rl[export]'\n")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_replaced_and_no_temporary_file_is_left(checkpoints, tmp_path):
    (tmp_path / "policy.onnx").write_bytes(b"an older export")
    (tmp_path / "policy.onnx.json").write_text("{}")
    main([str(checkpoints["cartpole"]), "--onnx", str(tmp_path / "policy.onnx")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx", "policy.onnx.json"]
    assert json.loads((tmp_path / "policy.onnx.json").read_text())["file"] == "policy.onnx"
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    assert session.run(["action"], {"obs": np.zeros((2, 4), np.float32)})[0].shape == (2, 1)


def test_the_command_line_entry(checkpoints, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pipeline.export", str(checkpoints["discrete"]),
                           "--onnx", str(tmp_path / "policy.onnx")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (f"checkpoint {checkpoints['discrete'] / 'latest.pt'}: policy version 7, "
                        "4,096 agent-steps; obs [N, 81] float32 -> action [N, 3] int64 (multi_discrete 3,3,2)")
    assert re.fullmatch(rf"wrote {re.escape(str(tmp_path / 'policy.onnx'))} \(onnx, opset 17, [\d,]+ bytes\) "
                        rf"and {re.escape(str(tmp_path / 'policy.onnx.json'))}", lines[1])
    assert done.stderr == ""
    truncated = DAMAGE["truncated"][0](checkpoints["discrete"] / "latest.pt", tmp_path)
    done = subprocess.run([sys.executable, "-m", "pipeline.export", str(truncated), "--torchscript",
                           str(tmp_path / "p.pt")], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert re.fullmatch(r"error: " + DAMAGE["truncated"][1] + "\n", done.stderr), done.stderr
    assert not (tmp_path / "p.pt").exists()


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(checkpoints, tmp_path, capsys):
    with tiny_filesystem(tmp_path / "disk") as disk:
        filler = fill(disk, leave=4096)
        line = _error_line(capsys, [str(checkpoints["discrete"]), "--onnx", str(disk / "policy.onnx")], code=1)
        assert line == f"error: cannot write {disk / 'policy.onnx'}: no space left on device"
        assert sorted(p.name for p in disk.iterdir()) == [filler.name]
