"""The live spacetime graph's numbers (pipeline/play/spacetime.py): the same regions, paths and
flags as the reach model computes them step by step, compact, and None where nothing is drawn."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from pipeline.play import spacetime
from pipeline.play.path_tables import HoldPathTable
from sim import BatchedSim
from sim.config import SimConfig
from sim.reach.missile import cached_tables
from sim.reach.threat import escape_path, hold_path, reach_summary, threat_region
from sim.state import SimState

CONFIG = SimConfig()
F64 = torch.float64


def make_frame(enemy_v: tuple[float, float] = (0.0, -283.0), enemy_controls: tuple[float, float] = (1.0, 0.5),
               ammo: tuple[int, int] = (6, 6), alive: tuple[bool, bool] = (True, True),
               enemy_xy: tuple[float, float] = (40_000.0, 5_000.0)) -> dict[str, np.ndarray]:
    """Red at (1 km, -2 km) flying east at 300 m/s, full throttle, rudder 0; blue as given."""
    return {
        "t_s": np.float64(12.0),
        "f_x": np.array([1_000.0, enemy_xy[0]]), "f_y": np.array([-2_000.0, enemy_xy[1]]),
        "f_vx": np.array([300.0, enemy_v[0]]), "f_vy": np.array([0.0, enemy_v[1]]),
        "f_rudder": np.array([0.0, enemy_controls[0]]), "f_throttle": np.array([1.0, enemy_controls[1]]),
        "f_alive": np.array(alive), "f_ammo": np.array(ammo),
    }


def decode(flat: list[int], origin: list[float]) -> tuple[np.ndarray, np.ndarray]:
    n = len(flat) // 2
    xs = np.array(flat[:n], dtype=np.float64) * spacetime.UNIT_M + origin[0]
    ys = np.array(flat[n:], dtype=np.float64) * spacetime.UNIT_M + origin[1]
    return xs, ys


def worst_distance(px: np.ndarray, py: np.ndarray, ex: np.ndarray, ey: np.ndarray) -> float:
    """The largest distance from a point of (px, py) to the nearest point of (ex, ey)."""
    d = np.hypot(px[:, None] - ex[None, :], py[:, None] - ey[None, :])
    return float(d.min(axis=1).max())


# Headings that are whole multiples of 360 / BEARINGS degrees put the graph's bearings on the
# reference's, so the two polygons share their points.
@pytest.mark.parametrize("enemy_v", [(0.0, -283.0), (-250.0, 0.0), (250.0 * math.cos(2.0944), 250.0 * math.sin(2.0944))])
def test_regions_match_the_reach_model(enemy_v: tuple[float, float]) -> None:
    frame = make_frame(enemy_v)
    p = spacetime.frame_payload(frame, CONFIG, 0)
    assert p is not None
    tables = cached_tables(CONFIG, "cpu", "float64")
    times = torch.tensor([0.0] + p["slice_t"], dtype=F64)
    speed = [math.hypot(frame["f_vx"][s], frame["f_vy"][s]) for s in (0, 1)]
    heading = [math.atan2(frame["f_vy"][s], frame["f_vx"][s]) for s in (0, 1)]
    for name, launcher, target, escape in (("threat_escape", 1, 0, True), ("threat_straight", 1, 0, False),
                                           ("own_reach", 0, 1, False)):
        ex, ey = threat_region(tables, CONFIG, (frame["f_x"][launcher], frame["f_y"][launcher]), speed[launcher],
                               heading[target], speed[target], escape, times, spacetime.BEARINGS)
        assert len(p[name]) == len(p["slice_t"])
        for k, flat in enumerate(p[name]):
            px, py = decode(flat, p["origin"])
            assert px.shape[0] == spacetime.BEARINGS + 1
            # Rounding to UNIT_M moves a point by at most UNIT_M / sqrt(2); the tables' speed
            # interpolation by metres.
            assert worst_distance(px, py, ex[k + 1].numpy(), ey[k + 1].numpy()) < spacetime.UNIT_M, (name, k)


def test_paths_and_flags_match_the_reach_model() -> None:
    frame = make_frame((-250.0, 0.0), (1.0, 0.5))
    for own in (0, 1):
        p = spacetime.frame_payload(frame, CONFIG, own)
        assert p is not None and p["seat"] == spacetime.SEATS[own]
        steps = torch.tensor(p["path_t"], dtype=F64)
        for who, s in (("own", own), ("enemy", 1 - own)):
            args = (float(frame["f_x"][s]), float(frame["f_y"][s]), float(frame["f_vx"][s]), float(frame["f_vy"][s]))
            hx, hy = hold_path(CONFIG, *args, float(frame["f_rudder"][s]), float(frame["f_throttle"][s]), steps)
            gx, gy = decode(p["paths"][who]["hold"], p["origin"])
            assert np.hypot(gx - hx.numpy(), gy - hy.numpy()).max() < spacetime.UNIT_M
            ex, ey = escape_path(CONFIG, *args, (float(frame["f_x"][1 - s]), float(frame["f_y"][1 - s])), steps)
            gx, gy = decode(p["paths"][who]["escape"], p["origin"])
            assert np.hypot(gx - ex.numpy(), gy - ey.numpy()).max() < spacetime.UNIT_M
        e = 1 - own
        ref = reach_summary(cached_tables(CONFIG, "cpu", "float64"),
                            (frame["f_x"][own], frame["f_y"][own]), (frame["f_vx"][own], frame["f_vy"][own]),
                            (frame["f_x"][e], frame["f_y"][e]), (frame["f_vx"][e], frame["f_vy"][e]))
        hud = p["hud"]
        assert hud["range_m"] == round(ref.range_m)
        assert hud["own_reach_straight_m"] == round(ref.own_reach_straight_m)
        assert hud["enemy_reach_escape_m"] == round(ref.enemy_reach_escape_m)
        assert hud["escape_margin_s"] == round(ref.escape_margin_s, 1)
        assert (hud["enemy_in_own_reach"], hud["own_in_enemy_reach"], hud["own_escape_possible"]) == (
            ref.enemy_in_own_reach, ref.own_in_enemy_reach, ref.own_escape_possible)
        assert hud["speed_mps"] == round(math.hypot(frame["f_vx"][own], frame["f_vy"][own]), 1)
        assert hud["missiles_left"] == int(frame["f_ammo"][own])


def test_controls_off_the_table_are_computed_exactly() -> None:
    table = HoldPathTable(CONFIG, torch.arange(0.0, 20.0 + 1e-9, 1.0, dtype=F64))
    times = torch.arange(0.0, 20.0 + 1e-9, 2.0, dtype=F64)
    got = table.path(0.0, 0.0, 200.0, 150.0, 0.3, 0.7, times)
    want = hold_path(CONFIG, 0.0, 0.0, 200.0, 150.0, 0.3, 0.7, times)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    on_table = table.path(0.0, 0.0, 200.0, 150.0, -1.0, 1.0, times)
    want = hold_path(CONFIG, 0.0, 0.0, 200.0, 150.0, -1.0, 1.0, times)
    assert float((on_table[0] - want[0]).abs().max()) < 20.0
    assert float((on_table[1] - want[1]).abs().max()) < 20.0


@pytest.mark.parametrize("case", [
    {}, {"enemy_xy": (140_000.0, -140_000.0)}, {"enemy_xy": (1_500.0, -1_800.0)},
    {"enemy_v": (0.0, -120.0), "enemy_controls": (-1.0, 0.0)}, {"enemy_v": (650.0, 0.0)},
])
def test_payload_is_compact(case: dict) -> None:
    p = spacetime.frame_payload(make_frame(**case), CONFIG, 1)
    assert p is not None
    text = json.dumps(p, separators=(",", ":"))
    assert len(text) < 10_000, len(text)
    for name in ("threat_escape", "threat_straight", "own_reach"):
        assert all(len(flat) == 2 * (spacetime.BEARINGS + 1) for flat in p[name])
    assert all(isinstance(v, int) for v in p["threat_escape"][0])


def test_nothing_drawn_without_missiles_or_fighters() -> None:
    p = spacetime.frame_payload(make_frame(ammo=(6, 0)), CONFIG, 0)
    assert p is not None and p["threat_escape"] is None and p["threat_straight"] is None
    assert p["own_reach"] is not None
    p = spacetime.frame_payload(make_frame(ammo=(0, 3)), CONFIG, 0)
    assert p is not None and p["own_reach"] is None and p["threat_escape"] is not None
    assert spacetime.frame_payload(make_frame(alive=(True, False)), CONFIG, 0) is None


@dataclass
class View:
    state: SimState
    config: SimConfig
    t: float


def test_payload_of_a_running_sim() -> None:
    spacetime.warm(CONFIG)
    sim = BatchedSim(1, CONFIG, seed=3)
    sim.reset()
    actions = torch.tensor([[[1, 2, 0], [0, 1, 0]]])
    sim.step(actions)
    t = float(sim.state.physics_steps[0]) * CONFIG.dt_s
    own = 1
    origin = [float(sim.state.f_px[own, 0]), float(sim.state.f_py[own, 0])]
    # The first call starts the computation in the worker and returns at once, without a graph.
    assert spacetime.payload(View(sim.state, CONFIG, t), "blue") is None
    spacetime.settle()
    first = spacetime.payload(View(sim.state, CONFIG, t), "blue")
    assert first is not None and set(first) == {"spacetime", "hud"}
    graph = first["spacetime"]
    assert graph["seat"] == "blue" and graph["t"] == t and graph["origin"] == origin
    assert first["hud"]["missiles_left"] == int(sim.state.f_ammo[own, 0])
    # Computed from a copy of the frame: stepping the sim on does not change it.
    sim.step(actions)
    # Within REFRESH_S the same graph is sent again, nothing computed; after it, a new one.
    again = spacetime.payload(View(sim.state, CONFIG, t + spacetime.REFRESH_S / 2), "blue")
    assert again is not None and again["spacetime"] is graph and graph["origin"] == origin
    later = t + spacetime.REFRESH_S
    stale = spacetime.payload(View(sim.state, CONFIG, later), "blue")
    assert stale is not None and stale["spacetime"] is graph  # the new one is being computed
    spacetime.settle()
    fresh = spacetime.payload(View(sim.state, CONFIG, later), "blue")
    assert fresh is not None and fresh["spacetime"]["t"] == later
    assert fresh["spacetime"]["origin"] == [float(sim.state.f_px[own, 0]), float(sim.state.f_py[own, 0])] != origin
    with pytest.raises(ValueError, match="seat must be one of"):
        spacetime.payload(View(sim.state, CONFIG, t), "green")


@pytest.mark.slow
def test_tables_are_built_in_a_thread_and_shared_across_scenarios() -> None:
    spacetime.warm(CONFIG)
    assert spacetime.reach_if_ready(CONFIG.replace(scenario="head_on", max_time_s=60.0)) is spacetime.reach_for(CONFIG)
    other = CONFIG.replace(dt_s=0.25, substeps=2, max_time_s=60.0)
    sim = BatchedSim(1, other, seed=1)
    sim.reset()
    view = View(sim.state, other, 0.0)
    assert spacetime.payload(view, "red") is None  # the tables are being built, in a thread
    builder = spacetime._builders[spacetime.physics_of(other)]
    builder.join(timeout=600)
    assert not builder.is_alive()
    assert spacetime.payload(view, "red") is None  # ready: the first graph is being computed
    spacetime.settle()
    ready = spacetime.payload(view, "red")
    assert ready is not None and ready["spacetime"]["seat"] == "red"


def test_fights_on_other_scenarios_use_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that differs only in scenario and time limit is looked up, never integrated."""
    from pipeline.play import path_tables

    spacetime.warm(CONFIG)

    def integrate(*args: object) -> None:
        raise AssertionError("a path was integrated step by step instead of looked up")

    monkeypatch.setattr(path_tables, "target_paths", integrate)
    monkeypatch.setattr(path_tables, "hold_path", integrate)
    p = spacetime.frame_payload(make_frame(), CONFIG.replace(scenario="head_on", max_time_s=90.0), 0)
    assert p is not None and p["threat_escape"] is not None
