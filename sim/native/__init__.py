"""The simulator's native CPU kernel (sim/native/decision.cpp and its headers): build, load and call.

One C++ op advances a whole decision step for blocks of environments held in L1 across every
physics step, skipping missile slots that are idle in a whole block, and writes the
observations; a second op builds observations for chosen environments (after resets). Both
follow sim/kernels.py and sim/observe.py and pass the same parity suite against
sim/reference/scalar.py. They are ``torch.ops.midrange_sim.*`` ops: the dispatcher releases the GIL
while they run, and ``torch.compile`` treats them as opaque.

The extension is built on first use with PyTorch's extension machinery (g++ and ninja) into a
cache directory keyed by the sources (headers included), flags and torch version, and loaded
from there by every later process without a rebuild: ``$MIDRANGE_SIM_NATIVE_DIR`` if set, else
``$XDG_CACHE_HOME/midrange_rl/native`` (``~/.cache/...``). Each build runs in its own
temporary directory and is moved into place in one rename, so concurrent first uses never see a
half-written library. If it cannot be built, :func:`load` says why and the simulator uses the
torch path (``BatchedSim(backend="auto")``, with one warning line).

Threads: the op splits its blocks over PyTorch's intra-op pool, so ``torch.set_num_threads``
sets its thread count too.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import torch

from sim.config import SimConfig
from sim.layout import (
    CLOSING_SCALE_MPS,
    MARGIN_SCALE_S,
    MISSILE_SPEED_SCALE_MPS,
    NORM_EPS,
    OBS_CLIP,
    RANGE_SCALE_M,
    SPEED_SCALE_MPS,
    ObsLayout,
)
from sim.state import SimState

SOURCE = Path(__file__).with_name("decision.cpp")
"""The translation unit the extension is compiled from; it includes the headers beside it."""
HEADERS = tuple(sorted(SOURCE.parent.glob("*.h")))
"""The kernel's headers (lane vectors, parameters, state, physics, observations)."""
CFLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-ffp-contract=off")
"""``-fopenmp``: PyTorch's ``at::parallel_for`` is an inline OpenMP loop in its headers (the
library's libgomp is the one already loaded); ``-fno-math-errno`` lets sqrt vectorize without
changing any result; no ``-ffast-math`` and no contraction into FMA, so results do not depend on
the compiler's choices."""
LDFLAGS = ("-fopenmp",)
MAX_SLOTS = 16
"""Missile slots per side the kernel holds (``missiles_per_fighter`` above this: torch path)."""

STATE_FIELDS = (
    "f_px", "f_py", "f_vx", "f_vy", "f_throttle", "f_rudder", "f_alive", "f_ammo",
    "f_since_launch", "f_fire_req", "m_active", "m_px", "m_py", "m_vx", "m_vy", "m_rudder",
    "m_steps", "physics_steps", "decision_steps",
)
"""The state tensors the ops take, in the order decision.cpp's ``StateField`` gives."""
ACC_FIELDS = (
    "live", "terminated", "truncated", "done", "winner", "end_reason", "launches", "hits", "reward",
)
"""The accumulator tensors ``decision_step`` writes, in decision.cpp's ``AccField`` order."""

_lock = threading.Lock()
_loaded: bool | None = None
_error: str | None = None


def cache_dir() -> Path:
    """Where built kernels are kept (see the module docstring)."""
    override = os.environ.get("MIDRANGE_SIM_NATIVE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "midrange_rl" / "native"


def _cpu_features() -> str:
    """The CPU's feature flags (``-march=native`` builds for exactly these), where the OS says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _build_tag() -> str:
    """The cache key of a built kernel: every source file's name and contents, the flags, and
    the toolchain, interpreter and CPU it is built with and for."""
    h = hashlib.sha256()
    for path in (SOURCE, *HEADERS):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for part in (*CFLAGS, *LDFLAGS, torch.__version__, sys.version, platform.machine(), _cpu_features(),
                 os.environ.get("CXX", "")):
        h.update(part.encode())
    return h.hexdigest()[:16]


def load() -> bool:
    """Load (building first if needed) the kernel into this process; True when its ops are
    available. The outcome is remembered; :func:`load_error` says why it failed."""
    global _loaded, _error
    with _lock:
        if _loaded is None:
            try:
                _load_library()
                _loaded = True
            except Exception as exc:  # any build or load failure means "use the torch path"
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
                # A compiler's log is long: its first error line says the most.
                errors = [line for line in lines if "error" in line.lower() and len(line) < 300]
                _error = f"{type(exc).__name__}: {(errors or lines or [repr(exc)])[0]}"
                _loaded = False
        return _loaded


def load_error() -> str | None:
    """Why :func:`load` failed (None if it did not, or was not called)."""
    return _error


def _load_library() -> None:
    name = f"midrange_sim_{_build_tag()}"
    target = cache_dir() / f"{name}.so"
    if not target.exists():
        from torch.utils import cpp_extension

        target.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
        try:
            cpp_extension.load(
                name=name, sources=[str(SOURCE)], extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS), extra_include_paths=[str(SOURCE.parent)], build_directory=str(build),
                is_python_module=False, verbose=False,
            )
            os.replace(build / f"{name}.so", target)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    else:
        torch.ops.load_library(str(target))
    _register_fakes()


def _register_fakes() -> None:
    """Shapes-only forms of the ops (they return nothing), so compiled code can call them."""
    for op in ("midrange_sim::decision_step", "midrange_sim::observe"):
        torch.library.register_fake(op)(lambda *args, **kwargs: None)


def supports(config: SimConfig) -> str | None:
    """None if the kernel can run ``config``, else the reason it cannot."""
    if config.missiles_per_fighter > MAX_SLOTS:
        return f"missiles_per_fighter={config.missiles_per_fighter} is above the kernel's {MAX_SLOTS}"
    if config.time_limit_steps + config.physics_steps_per_decision >= 2**30:
        # float32 states count an episode's physics steps in 32-bit lanes.
        return f"an episode of {config.time_limit_steps} physics steps is too long for the kernel"
    return None


class NativeKernel:
    """The two ops bound to one simulator's state, config and buffers."""

    def __init__(self, state: SimState, acc: object, config: SimConfig) -> None:
        if not load():
            raise RuntimeError(f"the native sim kernel is unavailable: {load_error()}")
        reason = supports(config)
        if reason is not None:
            raise ValueError(f"the native sim kernel cannot run this config: {reason}")
        self.state = [getattr(state, f) for f in STATE_FIELDS]
        self.acc = [getattr(acc, f) for f in ACC_FIELDS]
        for t in (*self.state, *self.acc):
            if t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError("the native sim kernel needs contiguous CPU tensors")
        self.writes_obs = True
        """Whether :meth:`decision_step` writes the observations (bench/sim.py turns it off to
        time the physics alone; a simulator always leaves it on)."""
        layout = ObsLayout.from_config(config)
        f, m = config.fighter, config.missile
        self.fparams = [
            config.dt_s, config.launch_offset_m, config.nav_constant, config.hit_radius_m**2,
            config.arena_half_width_m, config.missile_min_speed_mps**2,
            f.cd0, f.induced_drag_factor, f.lift_factor, f.max_thrust_mps2,
            m.cd0, m.induced_drag_factor, m.lift_factor, m.max_thrust_mps2,
            config.max_time_s, float(config.missiles_per_fighter),
            config.dt_s / config.missile_max_flight_time_s, RANGE_SCALE_M, SPEED_SCALE_MPS,
            MISSILE_SPEED_SCALE_MPS, CLOSING_SCALE_MPS, NORM_EPS, OBS_CLIP,
        ]
        self.iparams = [
            config.missiles_per_fighter, config.physics_steps_per_decision, config.cooldown_steps,
            config.burn_steps, config.max_flight_steps, config.time_limit_steps,
            config.obs_incoming_missiles, config.obs_own_missiles, layout.frame_size,
        ]
        self._reach_params(config)
        self.fparams_tensor = torch.tensor(self.fparams, dtype=torch.float64)
        """``fparams`` as the ops take it: built once, since with the reach table it holds over a
        thousand values that a list argument would convert one by one on every call."""

    def _reach_params(self, config: SimConfig) -> None:
        """The reach block's tables (the process's cached ones, in the state's dtype: the values
        the torch builder looks up) as the grids' first two nodes and counts, then the flat
        table after the model's parameters (sim/native/reach.h)."""
        if not config.obs_reach:
            self.fparams += [0.0] * 6 + [MARGIN_SCALE_S]
            self.iparams += [0, 0, 0, 0]
            return
        from sim.reach.missile import cached_tables

        reach = cached_tables(config, "cpu", config.dtype).reach
        grids = (reach.shooter_speeds_mps, reach.target_speeds_mps, reach.aspects_rad)
        self.fparams += [float(v) for grid in grids for v in grid[:2].tolist()] + [MARGIN_SCALE_S]
        self.fparams += reach.reach_m.reshape(-1).tolist()
        self.iparams += [1, *(int(grid.shape[0]) for grid in grids)]

    def decision_step(self, obs: torch.Tensor, final_obs: torch.Tensor) -> None:
        """All physics steps of one decision, its closing, and (unless ``writes_obs`` is off)
        the observations into both ``final_obs`` and ``obs``; the accumulators are rewritten
        for every environment."""
        torch.ops.midrange_sim.decision_step(
            self.state, self.acc, obs, final_obs, self.fparams_tensor, self.iparams, self.writes_obs
        )

    def observe(self, env_index: torch.Tensor, out: torch.Tensor) -> None:
        """Observations of the environments ``env_index`` (int64) into their rows of ``out``."""
        torch.ops.midrange_sim.observe(self.state, env_index, out, self.fparams_tensor, self.iparams)
