"""The simulator on CUDA: same results as the CPU, no host sync, CUDA-graph capture."""

from __future__ import annotations

import pytest
import torch

from sim import BatchedSim, SimConfig

pytestmark = pytest.mark.gpu


def _actions(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.stack([torch.randint(0, 3, (n, 2), generator=gen),
                        torch.randint(0, 3, (n, 2), generator=gen),
                        (torch.rand(n, 2, generator=gen) < 0.2).long()], dim=-1)


def test_cuda_matches_cpu() -> None:
    n = 256
    config = SimConfig(dtype="float64", max_time_s=30.0)
    cpu, gpu = BatchedSim(n, config, seed=1), BatchedSim(n, config, device="cuda", seed=1)
    torch.testing.assert_close(gpu.reset().cpu(), cpu.reset(), rtol=1e-9, atol=1e-9)
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):
        a = _actions(n, gen)
        oc, og = cpu.step(a), gpu.step(a.cuda())
        assert torch.equal(og.winner.cpu(), oc.winner)
        torch.testing.assert_close(og.obs.cpu(), oc.obs, rtol=1e-6, atol=1e-6)


def test_step_has_no_host_sync_and_captures_in_a_cuda_graph() -> None:
    n = 1024
    sim = BatchedSim(n, SimConfig(max_time_s=20.0), device="cuda", seed=2)
    sim.reset()
    gen = torch.Generator().manual_seed(0)
    static = _actions(n, gen).cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up on the side stream before capture
            sim.step(static)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.set_sync_debug_mode("error")
    try:
        sim.step(static)  # would raise on any synchronizing call
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sim.step(static)
    ended = 0
    for _ in range(60):
        static.copy_(_actions(n, gen).cuda())
        graph.replay()
        ended += int(sim._acc.done.sum())
    sim.check_errors()
    assert ended > 0


def test_out_of_range_action_is_reported_at_check_errors() -> None:
    sim = BatchedSim(8, device="cuda")
    sim.reset()
    bad = torch.ones(8, 2, 3, dtype=torch.int64, device="cuda")
    bad[3, 0, 1] = 7
    sim.step(bad)  # no host sync: the flag is set on the device
    with pytest.raises(ValueError, match="out of range"):
        sim.check_errors()
