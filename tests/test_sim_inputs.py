"""Bad input at the simulator's boundary gets a clear error; compiled equals eager."""

from __future__ import annotations

import pytest
import torch

from sim import BatchedSim, SimConfig


def _ready(n: int = 4, **overrides: object) -> BatchedSim:
    sim = BatchedSim(n, config=SimConfig(**overrides))
    sim.reset()
    return sim


@pytest.mark.parametrize(
    "field, value",
    [
        ("dt_s", 0.0), ("dt_s", float("nan")), ("substeps", 0), ("substeps", 2.5),
        ("time_scale", 1.3), ("missiles_per_fighter", 0), ("hit_radius_m", -1.0),
        ("scenario", "dogfight"), ("action_mode", "joystick"), ("dtype", "float16"),
        ("obs_incoming_missiles", 7), ("spawn_separation_m", (30_000.0, 20_000.0)),
        ("spawn_speed_mps", (0.0, 10.0)), ("arena_half_width_m", 20_000.0), ("max_time_s", "300"),
    ],
)
def test_bad_config_value_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field.split("_m")[0] if field == "arena_half_width_m" else field):
        SimConfig(**{field: value})


@pytest.mark.parametrize(
    "overrides, message",
    [
        # --time-scale 1e9 used to be accepted: one decision step of 5e8 s never ended.
        ({"time_scale": 1e9}, r"decision step of 5e\+08 s .*time_scale=1000000000\.0\) is longer than "
                              r"the 10 s allowed: lower time_scale \(at most 20 here\)"),
        ({"time_scale": 21.0}, r"decision step of 10\.5 s"),
        ({"substeps": 101}, r"decision step of 10\.1 s .*substeps=101"),
        ({"dt_s": 0.5, "substeps": 1, "time_scale": 21.0}, r"lower time_scale \(at most 20 here\)"),
        ({"max_time_s": 0.4}, r"max_time_s=0\.4 is shorter than one decision step \(0\.5 s"),
        ({"time_scale": 4.0, "max_time_s": 1.5}, r"max_time_s=1\.5 is shorter than one decision step \(2 s"),
    ],
)
def test_decision_step_is_bounded_by_ten_seconds_and_by_the_episode(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        SimConfig(**overrides)


def test_decision_step_bounds_admit_their_limits() -> None:
    assert SimConfig(time_scale=20.0).decision_dt_s == pytest.approx(10.0)
    assert SimConfig(dt_s=1 / 60, substeps=600).physics_steps_per_decision == 600
    assert SimConfig(max_time_s=0.5).max_decisions == 1
    assert SimConfig(time_scale=4.0, max_time_s=2.0).max_decisions == 1


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ValueError, match="substep_count"):
        SimConfig.from_dict({"substep_count": 3})
    assert SimConfig.from_dict({"fighter": {"lift_to_drag": 6.0}}).fighter.lift_to_drag == 6.0


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        BatchedSim(0)
    with pytest.raises(ValueError, match="config"):
        BatchedSim(2, config={"dt_s": 0.1})  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="reset"):
        BatchedSim(2).step(torch.zeros(2, 2, 3, dtype=torch.int64))


def test_wrong_shape_dtype_and_device() -> None:
    sim = _ready()
    with pytest.raises(ValueError, match=r"shape \(4, 2, 3\), got \(4, 3\)"):
        sim.step(torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="integer tensor"):
        sim.step(torch.zeros(4, 2, 3))
    with pytest.raises(ValueError, match=r"device cpu, got meta"):
        sim.step(torch.zeros(4, 2, 3, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match=r"torch\.Tensor"):
        sim.step([[0, 0, 0]] * 4)  # type: ignore[arg-type]
    cont = _ready(action_mode="continuous")
    with pytest.raises(ValueError, match="floating-point"):
        cont.step(torch.zeros(4, 2, 3, dtype=torch.int64))


def test_out_of_range_discrete_index_and_nan_are_errors_and_lose_nothing() -> None:
    sim = _ready()
    before = sim.state.clone()
    bad = torch.ones(4, 2, 3, dtype=torch.int64)
    bad[2, 1, 0] = 3
    with pytest.raises(ValueError, match="out of range"):
        sim.step(bad)
    bad[2, 1, 0] = 1
    bad[0, 0, 2] = -1
    with pytest.raises(ValueError, match="fire in"):
        sim.step(bad)
    # The refused step changed nothing.
    for name, tensor in sim.state.tensors().items():
        assert torch.equal(tensor, before.tensors()[name]), name
    cont = _ready(action_mode="continuous")
    nan = torch.zeros(4, 2, 3)
    nan[1, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        cont.step(nan)


def test_continuous_values_are_clipped_to_their_bounds() -> None:
    a = _ready(action_mode="continuous", dtype="float64")
    b = _ready(action_mode="continuous", dtype="float64")
    wild = torch.tensor([[5.0, 7.0, 0.9], [-3.0, -1.0, 0.2]], dtype=torch.float64).expand(4, 2, 3)
    tame = torch.tensor([[1.0, 1.0, 0.9], [-1.0, 0.0, 0.2]], dtype=torch.float64).expand(4, 2, 3)
    for _ in range(5):
        a.step(wild.contiguous())
        b.step(tame.contiguous())
    for name, tensor in a.state.tensors().items():
        assert torch.equal(tensor, b.state.tensors()[name]), name


def test_bad_env_mask() -> None:
    sim = _ready()
    with pytest.raises(ValueError, match="bool"):
        sim.reset(torch.ones(4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        sim.reset(torch.ones(3, dtype=torch.bool))


@pytest.mark.slow
def test_compiled_step_matches_eager() -> None:
    n = 64
    eager = BatchedSim(n, seed=7, backend="torch")
    fused = BatchedSim(n, seed=7, compile=True, backend="torch")
    torch.testing.assert_close(fused.reset(), eager.reset(), rtol=1e-5, atol=1e-5)
    gen = torch.Generator().manual_seed(3)
    ended = 0
    for _ in range(60):
        a = torch.stack([torch.randint(0, 3, (n, 2), generator=gen),
                         torch.randint(0, 3, (n, 2), generator=gen),
                         (torch.rand(n, 2, generator=gen) < 0.2).long()], dim=-1)
        oe, of = eager.step(a), fused.step(a)
        for field in ("terminated", "truncated", "winner", "end_reason", "launches", "hits", "episode_steps"):
            assert torch.equal(getattr(oe, field), getattr(of, field)), field
        torch.testing.assert_close(of.obs, oe.obs, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(of.final_obs, oe.final_obs, rtol=1e-4, atol=1e-4)
        ended += int(oe.done.sum())
    for name, tensor in eager.state.tensors().items():
        other = fused.state.tensors()[name]
        if tensor.is_floating_point():
            torch.testing.assert_close(other, tensor, rtol=1e-4, atol=1e-2, msg=name)
        else:
            assert torch.equal(other, tensor), name
    assert ended > 0


def test_sync_free_step_equals_the_data_dependent_step() -> None:
    # The sync-free form is what runs on accelerators; check it on the CPU against the default.
    n = 48
    plain = BatchedSim(n, seed=5, config=SimConfig(max_time_s=20.0), backend="torch")
    masked = BatchedSim(n, seed=5, config=SimConfig(max_time_s=20.0), sync_free=True, backend="torch")
    assert torch.equal(plain.reset(), masked.reset())
    gen = torch.Generator().manual_seed(2)
    resets = 0
    for _ in range(80):
        a = torch.stack([torch.randint(0, 3, (n, 2), generator=gen),
                         torch.randint(0, 3, (n, 2), generator=gen),
                         (torch.rand(n, 2, generator=gen) < 0.2).long()], dim=-1)
        op, om = plain.step(a), masked.step(a)
        assert torch.equal(op.obs, om.obs)
        assert torch.equal(op.final_obs, om.final_obs)
        resets += int(op.done.sum())
    for name, tensor in plain.state.tensors().items():
        assert torch.equal(tensor, masked.state.tensors()[name]), name
    assert resets > n


def test_state_and_result_buffers_are_updated_in_place() -> None:
    sim = BatchedSim(32, seed=1, config=SimConfig(max_time_s=5.0))
    sim.reset()
    a = torch.ones(32, 2, 3, dtype=torch.int64)
    out = sim.step(a)
    pointers = {k: v.data_ptr() for k, v in sim.state.tensors().items()}
    result = {k: getattr(out, k).data_ptr() for k in ("obs", "final_obs", "reward", "done", "winner")}
    for _ in range(20):  # through the time limit and its auto-resets
        again = sim.step(a)
    assert again is out
    assert {k: v.data_ptr() for k, v in sim.state.tensors().items()} == pointers
    assert {k: getattr(out, k).data_ptr() for k in result} == result


def test_every_phase_an_accelerator_compiles_traces_as_one_graph() -> None:
    """On accelerators all four phases are compiled with ``fullgraph=True``; the CPU compiles
    the events phase not at all. Trace each with dynamo alone (no code generation), mid-episode
    with missiles in flight, so a graph break would show here and not on the first GPU run."""
    import functools

    import torch._dynamo

    from sim.kernels import finish_decision, substep_events, substep_move
    from sim.observe import observe_into

    sim = BatchedSim(8, seed=1, backend="torch")
    sim.reset()
    fire = torch.ones(8, 2, 3, dtype=torch.int64)
    for _ in range(3):
        sim.step(fire)
    assert bool(sim.state.m_active.any()), "missiles should be in flight"
    args = (sim.state, sim._acc, sim.config)
    phases = {
        "move": (substep_move, args),
        "events": (substep_events, args),
        "finish": (finish_decision, args),
        "observe": (functools.partial(observe_into, fused=True),
                    (sim.state, sim.config, torch.zeros_like(sim._obs))),
    }
    for name, (fn, fn_args) in phases.items():
        torch._dynamo.reset()
        report = torch._dynamo.explain(fn)(*fn_args)
        assert report.graph_break_count == 0, f"{name}: {report.break_reasons}"
        assert report.graph_count == 1, name
