"""The fused Triton kernel (sim/fused.py, ``backend="triton"``) against the torch path, on the CPU
under Triton's interpreter: the same outcomes, observations and state to rounding."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from sim import BatchedSim, SimConfig

HAS_TRITON = importlib.util.find_spec("triton") is not None
# Triton beside torch's CPU build prints nanobind's leak report at every exit, which the suite's
# one-line error messages would not survive; so .ci/run installs it into a folder of its own,
# named here, and only the interpreter's subprocesses see it.
TRITON_SITE = os.environ.get("MIDRANGE_TRITON_SITE", "")
needs_triton = pytest.mark.skipif(not HAS_TRITON and not TRITON_SITE,
                                  reason="Triton is not installed (.ci/run puts it in $MIDRANGE_TRITON_SITE)")

AGREE = textwrap.dedent("""
    import torch
    from sim import BatchedSim, SimConfig

    n = 64
    config = SimConfig({kwargs})
    torch_path = BatchedSim(n, config, device="{device}", seed=7, backend="torch", sync_free=True)
    fused = BatchedSim(n, config, device="{device}", seed=7, backend="triton", sync_free=True)
    torch.testing.assert_close(fused.reset(), torch_path.reset(), rtol=0, atol=0)
    gen = torch.Generator().manual_seed(3)
    ended = launched = hit = 0
    for _ in range({steps}):
        a = torch.stack([torch.randint(0, 3, (n, 2), generator=gen),
                         torch.randint(0, 3, (n, 2), generator=gen),
                         (torch.rand(n, 2, generator=gen) < 0.2).long()], dim=-1).to("{device}")
        ot, of = torch_path.step(a), fused.step(a)
        for field in ("terminated", "truncated", "winner", "end_reason", "launches", "hits",
                      "episode_steps", "reward"):
            assert torch.equal(getattr(ot, field), getattr(of, field)), field
        torch.testing.assert_close(of.obs, ot.obs, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(of.final_obs, ot.final_obs, rtol=1e-4, atol=1e-4)
        ended += int(ot.done.sum())
        launched += int(ot.launches.sum())
        hit += int(ot.hits.sum())
    for name, tensor in torch_path.state.tensors().items():
        other = fused.state.tensors()[name]
        if tensor.is_floating_point():
            torch.testing.assert_close(other, tensor, rtol=1e-4, atol=1e-2, msg=name)
        else:
            assert torch.equal(other, tensor), name
    print("ended", ended, "launched", launched, "hit", hit, "reasons", sorted(set(ot.end_reason.tolist())))
""")


def _agree(steps: int, device: str = "cpu", **kwargs: object) -> str:
    # The interpreter is chosen when Triton is first imported: a process of its own.
    env = {**os.environ, "TRITON_INTERPRET": "1" if device == "cpu" else "0"}
    if TRITON_SITE:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (TRITON_SITE, env.get("PYTHONPATH", "")) if p)
    code = (AGREE.replace("{kwargs}", ", ".join(f"{k}={v!r}" for k, v in kwargs.items()))
            .replace("{steps}", str(steps)).replace("{device}", device))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
@needs_triton
def test_the_fused_kernel_steps_as_the_torch_path_does():
    out = _agree(60)
    ended, launched, hit = (int(x) for x in out.split()[1:6:2])
    # Fights ended, missiles flew and hit: the comparison covered the rules, not idle skies.
    assert ended > 0 and launched > 0 and hit > 0, out


@pytest.mark.slow
@needs_triton
def test_the_fused_kernel_agrees_with_fewer_missiles_and_a_short_time_limit():
    # 3 slots (a tile of 4 with one masked off), and fights that end at the time limit.
    out = _agree(40, missiles_per_fighter=3, obs_incoming_missiles=3, obs_own_missiles=3, max_time_s=15.0)
    assert int(out.split()[1]) > 0, out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_cuda_device_the_compiled_kernel_steps_as_the_torch_path_does():
    out = _agree(60, device="cuda")
    assert int(out.split()[1]) > 0 and int(out.split()[5]) > 0, out


def test_the_fused_backend_says_why_it_cannot_run():
    if not HAS_TRITON:
        with pytest.raises(ValueError, match="Triton is not installed"):
            BatchedSim(4, backend="triton")
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            BatchedSim(4, backend="triton")
    with pytest.raises(ValueError, match="float32"):
        BatchedSim(4, SimConfig(dtype="float64"), backend="triton")
    with pytest.raises(ValueError, match="CUDA devices, not meta"):
        BatchedSim(4, device=torch.device("meta"), backend="triton")


def test_auto_never_picks_the_fused_kernel():
    assert BatchedSim(4, backend="auto").backend in ("native", "torch")
