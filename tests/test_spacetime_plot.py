"""The spacetime graph (pipeline/drawing/spacetime.py): the drawn regions are the reach model's, and
a predicted position is inside the drawn region exactly when the model says it is caught."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.drawing.spacetime import (
    FightState,
    draw_spacetime,
    fight_state,
    spacetime_geometry,
    write_spacetime,
)
from pipeline.replay import main as replay_main
from sim import SimConfig
from sim.reach.missile import cached_tables
from sim.reach.spacetime import reach_by_time
from sim.reach.tables import target_paths
from sim.reach.threat import threat_region
from sim.replay.format import load_replay
from tests.replay_damage import record_fight

pytest.importorskip("matplotlib")
from matplotlib.path import Path as MplPath

CONFIG = SimConfig()


def head_on(range_m: float) -> FightState:
    """Red at the origin heading east, blue ``range_m`` east heading west, both 300 m/s."""
    return FightState(config=CONFIG, t_s=0.0, own=0, x=(0.0, range_m), y=(0.0, 0.0),
                      vx=(300.0, -300.0), vy=(0.0, 0.0), rudder=(0.0, 0.0), throttle=(0.6, 0.6))


def drawn(fig, gid: str) -> np.ndarray:
    """``[B, 2]`` km of the top-down line with this gid."""
    ax2 = fig.axes[1]
    (line,) = [ln for ln in ax2.get_lines() if ln.get_gid() == gid]
    return np.asarray(line.get_xydata())


@pytest.mark.parametrize("range_m", [12_000.0, 28_000.0])
def test_drawn_region_at_time_t_is_the_reach_models(range_m):
    state = head_on(range_m)
    geom = spacetime_geometry(state, horizon_s=60.0, slice_s=10.0)
    fig = draw_spacetime(state, geom)
    tables = cached_tables(CONFIG, "cpu", "float64")
    times = torch.tensor(geom.slice_times_s)
    for name, launcher, target, escape in (("threat-escape", 1, 0, True), ("threat-straight", 1, 0, False),
                                           ("own-reach", 0, 1, False)):
        heading = math.atan2(state.vy[target], state.vx[target])
        x, y = threat_region(tables, CONFIG, (state.x[launcher], state.y[launcher]), 300.0, heading,
                             300.0, escape, times)
        for k, t in enumerate(geom.slice_times_s[1:], start=1):
            xy = drawn(fig, f"{name}:{t:g}")
            np.testing.assert_allclose(xy[:, 0], x[k].numpy() / 1e3, rtol=0, atol=1e-9)
            np.testing.assert_allclose(xy[:, 1], y[k].numpy() / 1e3, rtol=0, atol=1e-9)

    # Along the line from blue (the launcher) to red, red flying at blue and then escaping:
    # the region's edge is blue + reach_by_time(t) + the escape's displacement, and red's
    # predicted escape position is inside the drawn region exactly when reach_by_time(t)
    # covers the range now.
    psi = torch.tensor([0.0], dtype=torch.float64)  # red flies along blue's line of sight to it
    r_t = reach_by_time(tables, True, torch.tensor([300.0], dtype=torch.float64),
                        torch.tensor([300.0], dtype=torch.float64), psi.cos() * -1, psi.sin(), times)[0]
    along, _ = target_paths(CONFIG, torch.tensor([300.0], dtype=torch.float64),
                            torch.tensor([math.pi], dtype=torch.float64), True, times)
    ex, ey = geom.paths["own escape"]
    caught_any = False
    for k, t in enumerate(geom.slice_times_s[1:], start=1):
        edge = drawn(fig, f"threat-escape:{t:g}")
        west = edge[np.argmin(edge[:, 0])]
        assert west[0] == pytest.approx((range_m - float(r_t[k]) - float(along[0, k])) / 1e3, abs=1e-6)
        j = int(np.argmin(np.abs(geom.path_times_s - t)))
        inside = MplPath(edge).contains_point((ex[j] / 1e3, ey[j] / 1e3))
        if abs(float(r_t[k]) - range_m) > 0.01 * range_m:
            assert inside == (float(r_t[k]) >= range_m), (t, float(r_t[k]))
        caught_any |= inside
    # 12 km is inside the escape reach (about 17 km): caught; 28 km escapes.
    assert caught_any == (range_m < geom.summary.enemy_reach_escape_m)
    assert geom.summary.own_escape_possible == (range_m > 17_000)


def test_paths_start_at_the_fighters_and_the_escape_turns_away():
    state = head_on(28_000.0)
    geom = spacetime_geometry(state, horizon_s=30.0)
    for name, s in (("own hold", 0), ("own escape", 0), ("enemy hold", 1), ("enemy escape", 1)):
        x, y = geom.paths[name]
        assert (x[0], y[0]) == pytest.approx((state.x[s], state.y[s]))
    # Red holds its heading east; escaping it ends up west of where it started.
    assert geom.paths["own hold"][0][-1] > 8_000
    assert geom.paths["own escape"][0][-1] < -3_000
    # Head-on the margin is (range - escape reach) / closing speed.
    s = geom.summary
    assert s.escape_margin_s == pytest.approx((s.range_m - s.enemy_reach_escape_m) / 600.0, abs=0.3)


def test_a_recorded_fight_is_drawn(tmp_path: Path):
    path = record_fight(tmp_path, "crank", "shooter", episodes=1)
    replay = load_replay(path)
    state = write_spacetime(replay, tmp_path / "st.png", at_s=5.2)
    assert state.t_s == pytest.approx(5.0)
    assert (tmp_path / "st.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert state.future_t_s[0] == 0.0 and state.future_x.shape[1] == 2
    with pytest.raises(ValueError, match="outside the replay"):
        fight_state(replay, at_s=1e6)
    # The command line: python -m pipeline.replay FILE --spacetime OUT --at SECONDS --own blue.
    written = replay_main([str(path), "--spacetime", str(tmp_path / "cli.png"), "--at", "3", "--own", "blue"])
    assert written == {"--spacetime": tmp_path / "cli.png"}
    assert (tmp_path / "cli.png").stat().st_size > 10_000
