"""The native CPU kernel (sim/native/) against the torch path, its fallback and its inputs.

Parity of both backends with the scalar reference is in tests/test_sim_parity.py; here the two
backends are run side by side over many episodes and must tell the same story.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sim import BatchedSim, SimConfig

ROOT = Path(__file__).resolve().parents[1]


def _actions(gen: torch.Generator, n: int, fire_p: float) -> torch.Tensor:
    return torch.stack([torch.randint(0, 3, (n, 2), generator=gen),
                        torch.randint(0, 3, (n, 2), generator=gen),
                        (torch.rand(n, 2, generator=gen) < fire_p).long()], dim=-1)


def _side_by_side(config: SimConfig, n: int, steps: int, obs_tol: float, state_tol: float) -> dict[str, int]:
    sims = {b: BatchedSim(n, config, seed=4, backend=b) for b in ("torch", "native")}
    assert {b: s.backend for b, s in sims.items()} == {"torch": "torch", "native": "native"}
    torch.testing.assert_close(sims["native"].reset(), sims["torch"].reset(), rtol=obs_tol, atol=obs_tol)
    gen = torch.Generator().manual_seed(1)
    counts = {"ended": 0, "kills": 0, "launches": 0, "hits": 0}
    for step in range(steps):
        a = _actions(gen, n, 0.15)
        t, nat = sims["torch"].step(a), sims["native"].step(a)
        for field in ("terminated", "truncated", "done", "winner", "end_reason", "launches", "hits",
                      "episode_steps", "reward"):
            assert torch.equal(getattr(t, field), getattr(nat, field)), f"step {step}: {field}"
        torch.testing.assert_close(nat.final_obs, t.final_obs, rtol=obs_tol, atol=obs_tol)
        torch.testing.assert_close(nat.obs, t.obs, rtol=obs_tol, atol=obs_tol)
        counts["ended"] += int(t.done.sum())
        counts["kills"] += int(((t.winner == 0) | (t.winner == 1)).sum())
        counts["launches"] += int(t.launches.sum())
        counts["hits"] += int(t.hits.sum())
    ts, ns = sims["torch"].state.tensors(), sims["native"].state.tensors()
    for name, tensor in ts.items():
        if name == "m_rudder":
            continue  # a slot's last rudder is not state that anything reads once it is idle
        if tensor.is_floating_point():
            torch.testing.assert_close(ns[name], tensor, rtol=state_tol, atol=state_tol * 100, msg=name)
        else:
            assert torch.equal(ns[name], tensor), name
    return counts


def test_native_and_torch_agree_over_many_float64_episodes() -> None:
    config = SimConfig(dtype="float64", max_time_s=30.0, spawn_separation_m=(10_000.0, 25_000.0))
    counts = _side_by_side(config, n=128, steps=80, obs_tol=1e-7, state_tol=1e-7)
    assert counts["ended"] > 100 and counts["kills"] > 30 and counts["hits"] > 30


def test_native_and_torch_agree_in_float32_with_the_default_model() -> None:
    config = SimConfig(max_time_s=20.0, spawn_separation_m=(10_000.0, 25_000.0))
    counts = _side_by_side(config, n=128, steps=60, obs_tol=1e-3, state_tol=1e-3)
    assert counts["ended"] > 100 and counts["launches"] > 500


@pytest.mark.parametrize(("dtype", "tol"), [("float64", 1e-7), ("float32", 1e-3)])
def test_the_kernel_writes_the_reach_block_as_the_torch_builder_does(dtype: str, tol: float) -> None:
    # The reach block's table lookups and escape-margin search run in the kernel
    # (sim/native/reach.h): every column, the three reach ones included, as the torch path has them.
    config = SimConfig(dtype=dtype, obs_reach=True, max_time_s=20.0, spawn_separation_m=(10_000.0, 40_000.0))
    counts = _side_by_side(config, n=96, steps=50, obs_tol=tol, state_tol=tol)
    assert counts["ended"] > 20 and counts["launches"] > 200
    sim = BatchedSim(96, config, seed=4, backend="native")
    block = sim.reset()[..., -4:]
    # Far and near starts: reaches that differ (the no-escape reach the shorter), margins of both signs.
    assert all(block[..., i].std() > 0.01 for i in range(3))
    assert (block[..., 1] <= block[..., 0] + 1e-6).all() and (block[..., 1] < block[..., 0]).any()
    assert (block[..., 3] > 0).any() and (block[..., 3] < 0).any()


def test_the_peer_work_config_one_missile_per_fighter_ten_substeps() -> None:
    config = SimConfig(dtype="float64", missiles_per_fighter=1, obs_incoming_missiles=1,
                       obs_own_missiles=1, substeps=10, max_time_s=30.0,
                       spawn_separation_m=(8_000.0, 20_000.0))
    counts = _side_by_side(config, n=64, steps=60, obs_tol=1e-7, state_tol=1e-7)
    assert counts["ended"] > 50 and counts["hits"] > 5


def test_results_do_not_depend_on_the_thread_count() -> None:
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            sim = BatchedSim(700, SimConfig(max_time_s=20.0), seed=2, backend="native")
            sim.reset()
            gen = torch.Generator().manual_seed(0)
            for _ in range(30):
                out = sim.step(_actions(gen, 700, 0.2))
            outs.append((out.obs.clone(), sim.state.clone()))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0][0], outs[1][0])
    for name, tensor in outs[0][1].tensors().items():
        assert torch.equal(tensor, outs[1][1].tensors()[name]), name


def test_backend_choice_and_bad_input() -> None:
    assert BatchedSim(4, backend="torch").backend == "torch"
    assert BatchedSim(4, backend="native").backend == "native"
    assert BatchedSim(4, device="meta").backend == "torch"  # auto: torch off the CPU
    with pytest.raises(ValueError, match="backend must be one of"):
        BatchedSim(4, backend="cuda")
    with pytest.raises(ValueError, match="CPU only"):
        BatchedSim(4, device="meta", backend="native")
    many = SimConfig(missiles_per_fighter=17)
    with pytest.raises(ValueError, match="missiles_per_fighter=17"):
        BatchedSim(2, many, backend="native")
    assert BatchedSim(2, many).backend == "torch"


def test_a_failed_build_falls_back_to_torch_with_one_warning(tmp_path: Path) -> None:
    """No compiler: ``auto`` runs the torch path and says so once; ``native`` is an error."""
    script = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "import torch\n"
        "from sim import BatchedSim\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    a, b = BatchedSim(3), BatchedSim(5)\n"
        "print('BACKENDS', a.backend, b.backend)\n"
        "print('WARNINGS', len(caught))\n"
        "print('MESSAGE', caught[0].message if caught else '')\n"
        "a.reset(); a.step(torch.zeros(3, 2, 3, dtype=torch.int64))\n"
        "try:\n"
        "    BatchedSim(3, backend='native')\n"
        "except RuntimeError as exc:\n"
        "    print('NATIVE', exc)\n"
    )
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), MIDRANGE_SIM_NATIVE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT))
    env.pop("MIDRANGE_SIM_BACKEND", None)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "BACKENDS torch torch" in lines
    assert "WARNINGS 1" in lines
    message = next(line for line in lines if line.startswith("MESSAGE"))
    assert "native CPU kernel is unavailable" in message and "using the torch path" in message
    assert "\n" not in message
    assert any(line.startswith("NATIVE backend='native': the kernel could not be built") for line in lines)


def test_the_build_tag_covers_every_source_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to any header, not only to decision.cpp, must build a new kernel."""
    import sim.native as native

    assert {p.name for p in native.HEADERS} >= {"lanes.h", "params.h", "state.h", "physics.h", "observe.h"}
    before = native._build_tag()
    for i, header in enumerate(native.HEADERS):
        changed = tmp_path / header.name
        changed.write_bytes(header.read_bytes() + b"\n// changed\n")
        with monkeypatch.context() as m:
            m.setattr(native, "HEADERS", (*native.HEADERS[:i], changed, *native.HEADERS[i + 1:]))
            assert native._build_tag() != before, header.name
    assert native._build_tag() == before
