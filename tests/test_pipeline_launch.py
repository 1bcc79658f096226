"""Small end-to-end runs of the real pipeline: sync and async, exact counts, faults, resume."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actors.sim_actor import SimActor
from learner.checkpoint import load_policy, read_checkpoint
from pipeline.config import ConfigError, PipelineConfig, pick_device, resolve
from pipeline.config.files import load_toml
from pipeline.config.flags import parse_config
from pipeline.launch import main, run

T, B, ACTORS = 8, 8, 2
CHUNK = T * B


def small_config(tmp_path, *extra: str, steps: int = 10 * CHUNK) -> PipelineConfig:
    argv = [
        "--actors", str(ACTORS), "--envs-per-actor", str(B), "--rollout-len", str(T),
        "--total-steps", str(steps), "--opponent", "straight", "--reward", "outcome",
        "--device", "cpu", "--display", "none", "--run-dir", str(tmp_path / "run"),
        "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[16, 16]",
        "--set", "ppo.update_epochs=1", "--actor-processes", "off", *extra,
    ]
    return resolve(parse_config(argv), "cpu")


def assert_exact(result, chunks: int) -> None:
    s = result.ring
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    assert s.produced_chunks - s.aborted_chunks == chunks
    assert s.in_flight_samples == 0


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_small_run_completes_with_exact_counts(tmp_path, mode):
    extra = ("--sync",) if mode == "sync" else ()
    config = small_config(tmp_path, *extra, "--debug")
    result = run(config)
    assert result.exit_code == 0
    assert result.agent_steps == 10 * CHUNK
    assert_exact(result, 10)
    s = result.ring
    assert s.consumed_samples + s.dropped_samples == 10 * CHUNK
    assert s.reuses == 10 - min(10, config.ring.slots)  # FIFO free list: every slot, then reuse
    assert result.updates >= 10 // config.intake.slots_per_batch
    # Run directory: resolved config (reloadable), log, loadable checkpoint.
    run_dir = result.run_dir
    reloaded = resolve(load_toml(run_dir / "config.toml"))
    assert reloaded == config
    assert "exit code 0" in (run_dir / "run.log").read_text()
    policy = load_policy(run_dir / "checkpoints" / "latest.pt")
    assert policy.policy_version == result.updates
    assert read_checkpoint(result.checkpoint)["extra"]["agent_steps"] == 10 * CHUNK


def fail_actor_0(monkeypatch, at_chunk: int, times: int) -> None:
    """Make actor 0 raise while writing its chunk ``at_chunk`` in ``times`` incarnations."""
    original = SimActor.rollout
    failed = [0]

    def rollout(self, slot, should_stop=None):
        if self.actor_id == 0 and self.chunks_written == at_chunk and failed[0] < times:
            failed[0] += 1
            raise RuntimeError(f"injected fault: actor 0, chunk {at_chunk}")
        original(self, slot, should_stop)

    monkeypatch.setattr(SimActor, "rollout", rollout)


def test_actor_crash_is_recovered(tmp_path, monkeypatch):
    fail_actor_0(monkeypatch, at_chunk=1, times=1)
    config = small_config(tmp_path, "--actor-processes", "off")  # the fault is injected in-process
    result = run(config)
    assert result.exit_code == 0 and result.failures == 1
    s = result.ring
    assert s.aborted_chunks == 1  # the half-written slot went back FREE, counted dropped
    assert s.dropped_chunks >= 1
    assert_exact(result, 10)
    assert result.agent_steps == 10 * CHUNK  # the lost chunk was produced again
    log = (result.run_dir / "run.log").read_text()
    assert "Traceback" in log and "injected fault: actor 0, chunk 1" in log
    assert "actor 0 restarting on fresh environments" in log


def test_repeated_actor_failures_stop_the_run(tmp_path, capsys, monkeypatch):
    fail_actor_0(monkeypatch, at_chunk=0, times=10)
    argv = [
        "--actor-processes", "off", "--actors", "1", "--envs-per-actor", "4", "--rollout-len", "4", "--total-steps", "160",
        "--opponent", "straight", "--reward", "outcome", "--device", "cpu", "--display", "plain",
        "--run-dir", str(tmp_path / "run"), "--set", "run.max_actor_failures=2",
        "--set", "ppo.hidden_sizes=[8]",
    ]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "actors failed 3 times, more than run.max_actor_failures=2" in out
    assert (tmp_path / "run" / "checkpoints" / "latest.pt").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--actors", "0"], "actors.count must be an integer in [1, 1024], got 0"),
        (["--set", "run.nope=1"], "unknown option(s) in [run]: nope"),
        (["--set", "actors.count=two"], "actors.count must be an integer"),
        (["--time-scale", "0.3"], "sim: time_scale"),
        (["--config", "/nonexistent/x.toml"], "no such file"),
        (["--set", "ppo.gamma=2.0"], "ppo: gamma must be in [0, 1]"),
        (["--opponent", "nonsense"], "unknown agent 'nonsense'"),
        (["--device", "tpu"], "run.device must be"),
        (["--ring-slots", "1", "--slots-per-batch", "2"], "intake.slots_per_batch (2) must be <= ring.slots (1)"),
        (["--set", "ppo.policy_bias=[0, -4]"], "ppo.policy_bias has 2 values but the policy head has 8"),
        (["--set", "ppo.policy_bias=[0, nan]"], "policy_bias[1] must be a finite number"),
    ],
)
def test_bad_values_exit_2_naming_them(tmp_path, capsys, argv, message):
    base = ["--display", "none", "--run-dir", str(tmp_path / "r"), "--total-steps", "64",
            "--envs-per-actor", "4", "--rollout-len", "4"]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--ring", "gpu"], ["--actors", "x"], ["--bogus"]])
def test_bad_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_config_file_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[actors]\ncount = 3\nopponent = "shooter"\n[ppo]\nlearning_rate = 0.002\n')
    config = resolve(parse_config(["--config", str(path), "--actors", "5", "--set", "run.seed=9"]), "cpu")
    assert config.actors.count == 5  # a flag beats the file
    assert config.actors.opponent == "shooter" and config.run.seed == 9
    assert config.ppo.learning_rate == 0.002 and config.ppo.hidden_sizes == (64, 64)


def test_resume_continues_counts_and_version(tmp_path):
    first = run(small_config(tmp_path, steps=4 * CHUNK))
    version = torch.load(first.checkpoint, weights_only=True)["policy_version"]
    config = small_config(tmp_path, "--resume", str(first.run_dir), steps=8 * CHUNK)
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, run_dir=str(tmp_path / "run2")))
    second = run(config)
    assert second.exit_code == 0
    assert second.agent_steps == 8 * CHUNK
    assert second.ring.produced_chunks == 4  # only the remaining budget was produced
    assert torch.load(second.checkpoint, weights_only=True)["policy_version"] == version + second.updates


def test_a_run_stopped_at_stop_steps_resumes_on_the_whole_run_s_schedule(tmp_path):
    whole = 8 * CHUNK
    first = run(small_config(tmp_path, "--set", f"run.stop_steps={4 * CHUNK}", steps=whole))
    assert first.exit_code == 0 and not first.stop_reason
    assert first.agent_steps == 4 * CHUNK
    state = read_checkpoint(first.checkpoint)
    version = state["policy_version"]
    updates = resolve(parse_config(["--total-steps", str(whole), "--actors", str(ACTORS), "--envs-per-actor",
                                    str(B), "--rollout-len", str(T), "--device", "cpu"]), "cpu").ppo.total_updates
    # The schedule counts to the whole run: half way, half the starting learning rate is left
    # (a run of 4 chunks in all would have annealed it to 0).
    lr0 = small_config(tmp_path).ppo.learning_rate
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(lr0 * (1 - (version - 1) / updates))
    assert (f"paused at run.stop_steps (256 of 512 agent-steps): continue with --resume {first.run_dir} "
            "--set run.stop_steps=0") in (first.run_dir / "run.log").read_text()

    again = small_config(tmp_path, "--resume", str(first.run_dir), "--set", f"run.stop_steps={4 * CHUNK}", steps=whole)
    with pytest.raises(ConfigError, match=r"run.stop_steps \(256\) is already reached: .* has trained 256 agent-steps"):
        run(again)

    rest = run(small_config(tmp_path, "--resume", str(first.run_dir), "--set", "run.stop_steps=0", steps=whole))
    assert rest.exit_code == 0
    assert rest.agent_steps == whole
    assert rest.ring.produced_chunks == 4  # only the second half was produced
    assert read_checkpoint(rest.checkpoint)["policy_version"] == version + rest.updates


def test_stop_steps_beyond_the_budget_is_refused():
    with pytest.raises(ConfigError, match=r"run.stop_steps \(2,000\) must be at most run.total_steps \(1,000\)"):
        resolve(parse_config(["--total-steps", "1000", "--set", "run.stop_steps=2000"]), "cpu")


def test_metrics_exporter_serves_during_the_run(tmp_path):
    config = small_config(tmp_path, "--metrics-port", "0", steps=2 * CHUNK)
    result = run(config)
    assert result.exit_code == 0
    assert "metrics: http://127.0.0.1:" in (result.run_dir / "run.log").read_text()


def test_profile_writes_a_trace_and_an_overlap_report(tmp_path):
    import json

    config = small_config(tmp_path, "--profile", "2", "--metrics-port", "-1", steps=8 * CHUNK)
    result = run(config)
    assert result.exit_code == 0
    trace = result.run_dir / "trace.json"
    report = json.loads((result.run_dir / "trace.overlap.json").read_text())
    assert json.loads(trace.read_text())["traceEvents"]
    assert report["busy_s"]["learner"] > 0 and report["busy_s"]["actor"] > 0
    assert 0.0 <= report["overlap_fraction"] <= 1.0


def test_busy_metrics_port_falls_back_and_says_which(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        config = small_config(tmp_path, "--metrics-port", str(busy), steps=2 * CHUNK)
        result = run(config)
    assert result.exit_code == 0
    log = (result.run_dir / "run.log").read_text()
    assert f"(port {busy} was busy)" in log


def test_bad_metrics_address_exits_2(tmp_path, capsys):
    code = main(["--metrics-addr", " ", "--total-steps", "64", "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert "run.metrics_addr" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize(("mode", "ring", "compiled"), [
    ("async", "device", True), ("sync", "device", False), ("async", "pinned", False),
])
def test_cuda_run_completes_with_exact_counts(tmp_path, mode, ring, compiled):
    """The CUDA fast path end to end: actors on their own streams replaying captured steps,
    the learner on its stream, device or pinned ring; every slot field written (debug ring)."""
    argv = [
        "--actors", str(ACTORS), "--envs-per-actor", "256", "--rollout-len", str(T),
        "--total-steps", str(10 * T * 256), "--opponent", "random", "--reward", "shaped",
        "--device", "cuda", "--ring", ring, "--display", "none", "--run-dir", str(tmp_path / "run"),
        "--debug", "--set", "run.eval_episodes=0", "--set", f"run.compile_sim={str(compiled).lower()}",
        *(("--sync",) if mode == "sync" else ()),
    ]
    config = resolve(parse_config(argv), pick_device("cuda"))
    result = run(config)
    assert result.exit_code == 0
    assert result.cuda_graph_actors == ACTORS
    assert result.agent_steps == 10 * T * 256
    assert_exact(result, 10)
    policy = load_policy(result.run_dir / "checkpoints" / "latest.pt")
    assert policy.policy_version == result.updates > 0


@pytest.mark.gpu
def test_cuda_actor_crash_recaptures_while_others_run(tmp_path, monkeypatch):
    """A failed actor is rebuilt, and its step captured again, in a worker thread while the
    other actors replay their graphs and the learner trains: the run goes on, counts exact."""
    fail_actor_0(monkeypatch, at_chunk=1, times=1)
    argv = [
        "--actors", "3", "--envs-per-actor", "256", "--rollout-len", str(T),
        "--total-steps", str(12 * T * 256), "--opponent", "crank", "--reward", "outcome",
        "--device", "cuda", "--display", "none", "--run-dir", str(tmp_path / "run"), "--debug",
        "--set", "run.eval_episodes=0", "--set", "run.compile_sim=false",
    ]
    result = run(resolve(parse_config(argv), pick_device("cuda")))
    assert result.exit_code == 0 and result.failures == 1
    assert_exact(result, 12)
    log = (result.run_dir / "run.log").read_text()
    assert "actor 0 restarting on fresh environments" in log


def test_config_toml_reproduces_the_run_bit_for_bit(tmp_path):
    """The written config.toml is the whole truth: two sync runs from it (CPU, fixed seed)
    train bit-identical networks, optimizer states and observation statistics."""
    first = run(small_config(tmp_path, "--sync", "--set", "ppo.update_epochs=2", steps=12 * CHUNK))
    assert first.exit_code == 0
    path = first.run_dir / "config.toml"
    text = path.read_text()
    assert "hidden_sizes = [16, 16]" in text and "update_epochs = 2" in text  # every PPO value
    assert "# derived: ppo.total_updates" in text
    states = []
    for name in ("again1", "again2"):
        assert main(["--config", str(path), "--run-dir", str(tmp_path / name)]) == 0
        states.append(read_checkpoint(tmp_path / name / "checkpoints" / "latest.pt"))
    original = read_checkpoint(first.checkpoint)
    for state in states:
        for key in ("model", "optimizer"):
            flat_a, flat_b = _tensors(original[key]), _tensors(state[key])
            assert flat_a.keys() == flat_b.keys()
            for k in flat_a:
                assert torch.equal(flat_a[k], flat_b[k]), f"{key}.{k}"
        assert state["policy_version"] == original["policy_version"]


def _tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict by dotted path."""
    out: dict[str, torch.Tensor] = {}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else ()
    for k, v in items:
        if isinstance(v, torch.Tensor):
            out[f"{prefix}{k}"] = v
        else:
            out.update(_tensors(v, f"{prefix}{k}."))
    return out
