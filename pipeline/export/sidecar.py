"""The JSON sidecar beside an exported policy: what goes in, what comes out, and where it came
from, so that a program outside Python can feed the graph and act on its answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learner.network import ActorCritic
from learner.spaces import ActionSpec
from pipeline.export.graph import INPUT_NAME, ExportedPolicy
from sim.actions import ACTION_COMPONENTS, RUDDER_LEVELS, THROTTLE_LEVELS

FORMAT = "midrange-rl exported policy"
VERSION = 1
SIDECAR_SUFFIX = ".json"
"""The sidecar of ``OUT`` is ``OUT.json`` (``policy.onnx`` -> ``policy.onnx.json``)."""

_SIM_MEANINGS = {
    "rudder": "turn rate as a fraction of full rudder; positive turns left (counter-clockwise)",
    "throttle": "thrust as a fraction of full thrust",
    "fire": "launch a missile if one is left and the launcher is ready",
}


def sidecar_path(output: Path) -> Path:
    """Where the sidecar of the exported file ``output`` is written."""
    return output.with_name(output.name + SIDECAR_SUFFIX)


def is_sim_layout(layout: Any) -> bool:
    """Whether a checkpoint's ``obs_layout`` is the air-combat sim's (it names every component;
    a Gymnasium env's records the env and the size only)."""
    return isinstance(layout, dict) and isinstance(layout.get("names"), list)


def _sim_action_components(spec: ActionSpec) -> list[dict[str, Any]]:
    """The sim's rudder, throttle and fire components, as ``sim.actions`` decodes them."""
    if spec.is_discrete:
        values: tuple[tuple[float | bool, ...], ...] = (RUDDER_LEVELS, THROTTLE_LEVELS, (False, True))
        return [{"name": name, "choices": len(levels), "index_to_value": list(levels),
                 "meaning": _SIM_MEANINGS[name]}
                for name, levels in zip(ACTION_COMPONENTS, values, strict=True)]
    out = []
    for name, low, high in zip(ACTION_COMPONENTS, spec.low, spec.high, strict=True):
        meaning = _SIM_MEANINGS[name] + ("; fires when the value is above 0.5" if name == "fire" else "")
        out.append({"name": name, "low": low, "high": high, "meaning": meaning})
    return out


def _gym_action_components(spec: ActionSpec) -> list[dict[str, Any]]:
    """A Gymnasium env's components: their sizes or bounds (what they mean is the env's)."""
    if spec.is_discrete:
        return [{"name": f"action[{i}]", "choices": n} for i, n in enumerate(spec.nvec)]
    return [{"name": f"action[{i}]", "low": lo, "high": hi}
            for i, (lo, hi) in enumerate(zip(spec.low, spec.high, strict=True))]


def action_mapping(spec: ActionSpec, sim: bool) -> dict[str, Any]:
    """What the ``action`` output means: its kind and each component."""
    components = _sim_action_components(spec) if sim else _gym_action_components(spec)
    if spec.is_discrete:
        how = ("each component's index: the most likely choice (the first on a tie); "
               "index_to_value gives the value an index stands for" if sim
               else "each component's index: the most likely choice (the first on a tie)")
        if spec.kind == "discrete" and not sim:
            how += "; the env's Discrete action is action[:, 0]"
    else:
        how = ("the Gaussian's mean, unclipped: clip each component to [low, high] before "
               "stepping (the env clips it the same way)")
    return {"kind": spec.kind, "discrete": spec.is_discrete, "dtype": "int64" if spec.is_discrete else "float32",
            "deterministic": "the policy's mode", "how": how, "components": components}


def observation_layout(layout: Any, obs_dim: int) -> dict[str, Any]:
    """The observation's size and, for the sim, the name of every component in order and the
    scales they were divided by (as the checkpoint's layout records them)."""
    if is_sim_layout(layout):
        return {"size": obs_dim, "names": list(layout["names"]), "scales": layout.get("scales"),
                "layout_version": layout.get("version")}
    env = layout.get("env") if isinstance(layout, dict) else None
    return {"size": obs_dim, "names": None,
            "order": f"the observation vector of {env}, flattened" if env else "as the policy was trained on"}


def _table(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict (a part of a checkpoint's plain data), else an empty one."""
    return value if isinstance(value, dict) else {}


def describe(module: ExportedPolicy, policy: ActorCritic, state: dict[str, Any], checkpoint: Path,
             output: Path, file_format: str, opset: int | None) -> dict[str, Any]:
    """The sidecar of one exported file: ``file_format`` is ``"onnx"`` (with its ``opset``) or
    ``"torchscript"``; ``state`` is the checkpoint's contents (its layout, version, counters)."""
    layout = state.get("obs_layout")
    sim = is_sim_layout(layout)
    extra = _table(state.get("extra"))
    actors = _table(_table(extra.get("config")).get("actors"))
    env = "midrange" if sim else (layout.get("env") if isinstance(layout, dict) else None)
    agent_steps = extra.get("agent_steps")
    spec = policy.action_spec
    action_name, second = module.output_names()
    second_shape = ["N", spec.num_logits] if second == "logits" else ["N", spec.dim]
    second_what = ("the policy head's logits, the components' one after the other (nvec "
                   f"{list(spec.nvec)})" if second == "logits"
                   else "the standard deviation the policy samples with around the mean")
    norm = policy.obs_norm
    return {
        "format": FORMAT,
        "version": VERSION,
        "file": output.name,
        "file_format": file_format,
        **({"onnx_opset": opset} if opset is not None else {}),
        "checkpoint": str(checkpoint),
        "policy_version": int(state["policy_version"]),
        "agent_steps": int(agent_steps) if isinstance(agent_steps, int) else None,
        "env": env,
        **({} if sim else {"env_kwargs": actors.get("env_kwargs") or {}}),
        "inputs": {INPUT_NAME: {
            "shape": ["N", policy.obs_dim], "dtype": "float32",
            "what": "raw observations, as the env gives them",
            "normalization": (f"in the graph: (obs - mean) / sqrt(var + {norm.eps:g}), clipped to "
                              f"±{norm.clip:g}, with the checkpoint's statistics over "
                              f"{float(norm.count):.0f} observations") if policy.normalize_obs else "none",
        }},
        "outputs": {
            action_name: {"shape": ["N", spec.dim], "dtype": "int64" if spec.is_discrete else "float32",
                          "what": "the deterministic action (the policy's mode)"},
            second: {"shape": second_shape, "dtype": "float32", "what": second_what},
        },
        "observation": observation_layout(layout, policy.obs_dim),
        "action": action_mapping(spec, sim),
    }
