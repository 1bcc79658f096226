"""render_mode="rgb_array" (sim.envs.render through sim.envs.gym): the picture shows the sim's state,
the vector env draws the chosen env, and SB3's make_vec_env and Gymnasium's RecordVideo work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

import sim  # noqa: F401  (registers Midrange-v0)
from sim import SimConfig
from sim.envs.gym import MidrangeEnv, MidrangeVectorEnv
from sim.envs.render import SIDE_COLORS, draw_frame, fit_view, frame_from_state, threat_regions

pytest.importorskip("PIL")


def _has_color(img: np.ndarray, col: float, row: float, rgb: tuple[int, int, int], radius: int = 6) -> bool:
    r0, c0 = max(int(row) - radius, 0), max(int(col) - radius, 0)
    patch = img[r0:int(row) + radius + 1, c0:int(col) + radius + 1].astype(int)
    return bool((np.abs(patch - np.array(rgb)).sum(-1) < 30).any())


def test_rgb_array_shows_the_fighters_where_the_sim_has_them():
    env = MidrangeEnv(render_mode="rgb_array", scenario="head_on")
    with pytest.raises(RuntimeError, match="reset"):
        env.render()
    env.reset(seed=1)
    first = env.render()
    assert first.shape == (480, 640, 3) and first.dtype == np.uint8
    for _ in range(6):
        env.step(np.array([2, 2, 0]))
    img = env.render()
    assert not np.array_equal(img, first)
    keeper = env._frames
    frame, view = keeper.frames[-1], keeper._view
    col, row = view.to_px(frame["f_x"], frame["f_y"])
    for s in (0, 1):
        assert 0 <= col[s] < 640 and 0 <= row[s] < 480
        assert _has_color(img, col[s], row[s], SIDE_COLORS[s])
    # Drawn where the sim has them, not anywhere: red is not at blue's spot.
    assert not _has_color(img, col[1], row[1], SIDE_COLORS[0], radius=2)


def test_the_last_picture_of_an_episode_shows_how_it_ended():
    env = MidrangeEnv(render_mode="rgb_array", scenario="head_on", max_time_s=3.0)
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.array([1, 2, 0]))
        done = terminated or truncated
    assert env._frames.frames[-1]["t_s"] == pytest.approx(3.0)
    env.render()
    env.reset()
    assert env._frames.frames[-1]["t_s"] == 0.0
    assert len(env._frames.frames) == 1


def test_bad_render_modes_are_refused():
    with pytest.raises(ValueError, match="render_mode must be None or one of"):
        MidrangeEnv(render_mode="human")
    with pytest.raises(ValueError, match="render_env must be in"):
        MidrangeVectorEnv(2, render_mode="rgb_array", render_env=2)
    assert MidrangeEnv().render() is None


def test_vector_env_renders_the_chosen_env():
    vec = MidrangeVectorEnv(4, render_mode="rgb_array", render_env=2)
    vec.reset(seed=5)
    vec.step(np.zeros((4, 3), dtype=np.int64))
    (img,) = vec.render()
    frame = frame_from_state(vec._sim.state, 2, vec.config)
    view = vec._frames._view
    col, row = view.to_px(frame["f_x"], frame["f_y"])
    assert _has_color(img, col[0], row[0], SIDE_COLORS[0])
    assert _has_color(img, col[1], row[1], SIDE_COLORS[1])
    other = frame_from_state(vec._sim.state, 0, vec.config)
    assert not np.allclose(other["f_x"], frame["f_x"])


def test_threat_region_edge_is_the_reach_model():
    from sim.reach.missile import missile_tables
    from sim.reach.spacetime import reach_straight

    config = SimConfig(scenario="head_on")
    env = MidrangeEnv(render_mode="rgb_array", config=config)
    env.reset(seed=0)
    frame = env._frames.frames[-1]
    regions = threat_regions(frame, config, bearings=8)
    red = regions[0]
    assert red is not None and red.shape == (8, 2)
    # At bearing 0 (east of red) blue, flying as it does, is met at the reach the model gives.
    v_red = float(np.hypot(frame["f_vx"][0], frame["f_vy"][0]))
    v_blue = float(np.hypot(frame["f_vx"][1], frame["f_vy"][1]))
    psi = np.arctan2(frame["f_vy"][1], frame["f_vx"][1])
    one = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    reach = float(reach_straight(missile_tables(config), one(v_red), one(v_blue), one(np.cos(psi)), one(np.sin(psi)))[0])
    assert red[0] == pytest.approx([frame["f_x"][0] + reach, frame["f_y"][0]], abs=1.0)
    # With the same view, the drawing is deterministic.
    view = fit_view(frame["f_x"], frame["f_y"])
    assert np.array_equal(draw_frame(frame, view, config), draw_frame(frame, view, config))


def test_record_video_writes_a_video(tmp_path):
    pytest.importorskip("moviepy")
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(gymnasium.make("Midrange-v0", render_mode="rgb_array", scenario="head_on", max_time_s=4.0),
                      str(tmp_path), episode_trigger=lambda i: True, disable_logger=True)
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    env.close()
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000


SB3_SCRIPT = """
import numpy as np
import sim  # registers Midrange-v0 (SubprocVecEnv's forkserver workers import this script first)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

if __name__ == "__main__":
    vec = make_vec_env("Midrange-v0", n_envs=2, vec_env_cls=SubprocVecEnv)
    obs = vec.reset()
    for _ in range(3):
        obs, rewards, dones, infos = vec.step(np.stack([vec.action_space.sample() for _ in range(2)]))
    shapes = [image.shape for image in vec.get_images()]
    vec.close()
    print("obs", obs.shape, "images", shapes, "render_mode", vec.render_mode)
"""


@pytest.mark.slow
def test_sb3_make_vec_env_with_subprocesses(tmp_path):
    """SB3 passes render_mode="rgb_array" to every worker's env; a script as a user writes it."""
    pytest.importorskip("stable_baselines3")
    script = tmp_path / "sb3_vec.py"
    script.write_text(SB3_SCRIPT)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "images [(480, 640, 3), (480, 640, 3)] render_mode rgb_array" in done.stdout
