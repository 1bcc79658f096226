"""From user data to the typed tree: :func:`resolve` chooses, in one place, every value the user
left out that depends on the device or on other values (see :mod:`pipeline.config`), so the
``config.toml`` a run writes holds every value it used."""

from __future__ import annotations

import dataclasses
from typing import Any

from actors.workers.env_probe import check_env_in_child
from core.bounds import shown
from core.coerce import coerce
from learner.ppo_config import PPOConfig
from learner.spaces import ActionSpec
from pipeline.config.devices import device_is_cuda, pick_device, usable_cores
from pipeline.config.env_workers import default_workers_per_actor
from pipeline.config.errors import ConfigError
from pipeline.config.files import check_writable
from pipeline.config.recipe import sim_policy_bias
from pipeline.config.sections import (
    PPO_DERIVED,
    SECTIONS,
    SIM_ONLY,
    ActorsConfig,
    PipelineConfig,
    RunConfig,
)
from pipeline.config.validation import check_agent_spec, check_text, validate
from pipeline.envs.choice import EnvFactory, check_env_spec
from sim.config import SimConfig

CPU_TOTAL_STEPS = 7_000_000
"""The default budget on a CPU: about 4 minutes of training on 2 cores."""
SIM_PARTIAL_AMMO = 0.3
"""The sim's training default of ``sim.spawn_partial_ammo`` (the rules' own start is 0)."""
SIM_TEACHER = "tactic:pump"
"""The sim's default kickstarting teacher (``ppo.teacher``): the library's pump-and-re-commit
tactic, which beats ``crank`` 87 % of the time and loses 2 % (bench/RESULTS.md, "A teacher for
the first quarter of the run")."""
SIM_TEACHER_COEF = 1.0
"""The teacher's starting weight (``ppo.teacher_coef``); it falls to 0 at
``ppo.teacher_until`` (a quarter of the run)."""
SIM_GAMMA = 0.993
"""The sim's default discount: a decision every 0.5 s of a fight of up to 300 s, so 0.993 looks
about 70 s ahead (0.99: 50 s), long enough to price a missile kept for later (bench/RESULTS.md,
"A longer look ahead and a stronger hunt")."""


def _table(data: dict[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] must be a table, got {table!r}")
    return dict(table)


def _coerce_section(name: str, cls: type[Any], table: dict[str, Any]) -> Any:
    return coerce(cls, table, where=name, unknown="unknown option(s) in [{where}]: {names}", error=ConfigError)


def _check_gym_options(env: str, t: dict[str, dict[str, Any]], device: str) -> None:
    """Refuse, naming them, options a Gymnasium env cannot use (rather than ignore them)."""
    for key in SIM_ONLY:
        section, name = key.split(".")
        if name in t[section]:
            raise ConfigError(f"{key} does not apply to --env {env} (a Gymnasium env has its own "
                              "reward and no opponent)")
    if t["sim"]:
        raise ConfigError(f"[sim] options ({', '.join(sorted(t['sim']))}) do not apply to --env {env}")
    if device_is_cuda(device) and "device" in t["run"] and t["run"]["device"] != "auto":
        raise ConfigError(f"--env {env}: Gymnasium actors and their learner run on the CPU; "
                          f"run.device {t['run']['device']!r} is not supported with them")


def _check_env_in_child(env: str, actors: dict[str, Any]) -> None:
    """Make and reset the Gymnasium env once in a process of its own, before anything here
    makes or steps it: an env that exits or segfaults is then one line, not the launcher's
    end. A malformed spec or bad kwargs are left to the checks that name them."""
    kwargs = actors.get("env_kwargs", {})
    try:
        check_env_spec(env)
    except ValueError:
        return
    if isinstance(kwargs, dict):
        try:
            check_env_in_child(EnvFactory(env, kwargs), env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def resolve(data: dict[str, Any], device: str | None = None) -> PipelineConfig:
    """The run's whole configuration from user data (parsed TOML plus overrides).

    ``device`` (a concrete torch device string, taken as given; default: ``run.device`` of
    ``data``, which must exist, ``auto`` picking CUDA when present) decides the values the user
    left out: CPU defaults are sized so
    ``python -m pipeline.launch --actors 4`` trains visibly within minutes on a 2-core laptop,
    GPU defaults to fill the device. Resolving a resolved config's ``to_dict()`` gives it back.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a table, got {type(data).__name__}")
    unknown = sorted(set(data) - set(SECTIONS) - {"sim", "ppo"})
    if unknown:
        raise ConfigError(f"unknown config section(s): {', '.join(unknown)}")
    t = {name: _table(data, name) for name in (*SECTIONS, "sim", "ppo")}
    for name, cls in SECTIONS.items():  # the user's own values have their types before any is used
        _coerce_section(name, cls, t[name])
    if device is None:  # the user's device: it must exist
        requested = t["run"].get("device", RunConfig.device)
        if not isinstance(requested, str):
            raise ConfigError(f"run.device must be a string, got {requested!r}")
        device = pick_device(requested)
    env = t["actors"].get("env", ActorsConfig.env)
    if not isinstance(env, str):
        raise ConfigError(f"actors.env must be a string, got {env!r}")
    if env != "midrange":
        _check_gym_options(env, t, device)
        device = "cpu"
    elif t["actors"].get("env_kwargs"):
        raise ConfigError("actors.env_kwargs (--env-kwargs) applies to a Gymnasium env only; the "
                          "air-combat sim takes its options from [sim] (--set sim.FIELD=VALUE)")
    check_writable("actors.env_kwargs", t["actors"].get("env_kwargs", {}))
    cuda = device_is_cuda(device)
    t["run"]["device"] = device
    count = t["actors"].get("count", ActorsConfig.count)
    if not isinstance(count, int) or isinstance(count, bool):
        raise ConfigError(f"actors.count must be an integer, got {count!r}")
    if env != "midrange":
        # CleanRL's PPO for classic control (4 envs × 128 steps, 4 epochs of 4 minibatches),
        # as 4 actors × 4 envs × 32 steps, 4 chunks a batch.
        for section, key, value in (("run", "total_steps", 500_000), ("actors", "envs_per_actor", 4),
                                    ("actors", "rollout_len", 32),
                                    ("intake", "slots_per_batch", min(count, 4))):
            t[section].setdefault(key, value)
        _check_env_in_child(env, t["actors"])
        if "workers_per_actor" not in t["actors"]:
            t["actors"]["workers_per_actor"] = default_workers_per_actor(env, t["actors"], count)
        gym_ppo: dict[str, Any] = {"hidden_sizes": [64, 64], "update_epochs": 4,
                                   "num_minibatches": 4, "learning_rate": 2.5e-4}
        for key, value in gym_ppo.items():
            t["ppo"].setdefault(key, value)
    for section, key, value in (
        ("run", "total_steps", 2_000_000_000 if cuda else CPU_TOTAL_STEPS),
        ("run", "compile_sim", cuda),
        ("run", "compile_agents", not cuda and env == "midrange"
         and t["run"].get("total_steps", CPU_TOTAL_STEPS) >= 1_000_000),
        ("run", "compile_step", not cuda and env == "midrange"
         and t["run"].get("total_steps", CPU_TOTAL_STEPS) >= 1_000_000),
        ("run", "actor_threads", count if cuda else max(1, min(count, usable_cores() - 1))),
        ("actors", "envs_per_actor", 8192 if cuda else 64),
        ("actors", "rollout_len", 32 if cuda else 16),
        ("ring", "slots", 2 * count),
        ("intake", "slots_per_batch", min(count, 2)),
    ):
        t[section].setdefault(key, value)
    envs = t["actors"]["envs_per_actor"]
    if isinstance(envs, int) and not isinstance(envs, bool) and envs >= 1:
        # Up to 4 groups, as many as divide the actor's environments evenly.
        t["league"].setdefault("groups_per_actor", max(g for g in range(1, 5) if envs % g == 0))
    if env == "midrange":
        # Fire is irreversible and scarce: a fresh policy that fires in half of its decisions
        # empties its missiles at the first sight of the enemy, and learns to build on that
        # opening; one that rarely fires meets shots taken at every range and every moment
        # (bench/RESULTS.md, "Fire discipline").
        t["ppo"].setdefault("policy_bias", sim_policy_bias(t["sim"]))
        # The sim's observation carries the time left, so its time limit is part of the state
        # and a fight that reaches it ends there, a draw: bootstrapping at the limit instead
        # kept values of +0.5 to +1 in fights about to be drawn, and the fighter learned no
        # urgency (bench/RESULTS.md, "Fire discipline and the time limit"). The env still
        # reports truncation; this only chooses what the learner makes of it.
        t["ppo"].setdefault("bootstrap_truncated", False)
        # A curriculum of endgames: in 30 % of the starts a side begins short of missiles, so
        # the fighter meets, from the first updates on, the enemy already disarmed (to be hunted
        # down) and the last missile to be placed, states a full-ammunition start reaches only
        # late and rarely. Evaluations play the rules' start (bench/RESULTS.md, "A curriculum
        # of endgames").
        t["sim"].setdefault("spawn_partial_ammo", SIM_PARTIAL_AMMO)
        t["ppo"].setdefault("gamma", SIM_GAMMA)
        # Kickstarting: for the first quarter of the run the policy is also taught, on its own
        # samples, what a scripted tactic would do there, so every run starts from a fighter
        # that defends and re-commits instead of searching for one (without it one run in
        # twelve never learned to beat crank). ``--set ppo.teacher_coef=0`` turns it off.
        if t["ppo"].get("teacher_coef") != 0:
            t["ppo"].setdefault("teacher", SIM_TEACHER)
        if t["ppo"].get("teacher"):
            t["ppo"].setdefault("teacher_coef", SIM_TEACHER_COEF)
        if not cuda:
            t["ppo"].setdefault("entropy_coef", 0.003)
    if not cuda:
        # Small, quick updates on a laptop CPU: the sample budget is what limits learning there.
        cpu_ppo: dict[str, Any] = {"hidden_sizes": [64, 64], "update_epochs": 3,
                                   "num_minibatches": 2, "learning_rate": 1e-3}
        for key, value in cpu_ppo.items():
            t["ppo"].setdefault(key, value)
    parts: dict[str, Any] = {name: _coerce_section(name, cls, t[name]) for name, cls in SECTIONS.items()}
    try:
        parts["sim"] = SimConfig.from_dict(t["sim"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"sim: {exc}") from None
    derived = sorted(set(t["ppo"]) & set(PPO_DERIVED))
    if derived:
        raise ConfigError(f"ppo.{derived[0]} is derived (ppo.total_updates from run.total_steps, "
                          "ppo.seed from run.seed); set those instead")
    validate(PipelineConfig(**parts))  # every section but [ppo], which depends on them
    config = PipelineConfig(**parts)
    t["ppo"]["total_updates"] = max(-(-config.run.total_steps // config.samples_per_batch), 1)
    t["ppo"]["seed"] = config.run.seed
    try:
        ppo = PPOConfig.from_dict(t["ppo"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"ppo: {exc}") from None
    if env == "midrange" and ppo.policy_bias:
        head = ActionSpec.for_sim(config.sim).num_logits
        if len(ppo.policy_bias) != head:
            raise ConfigError(f"ppo.policy_bias has {len(ppo.policy_bias)} values but the policy head has "
                              f"{head} outputs (the sim's {config.sim.action_mode} actions; [] means zeros)")
    if ppo.teacher:
        if env != "midrange":
            raise ConfigError(f"ppo.teacher needs the air-combat sim's agents to teach; {env} has none "
                              f"(ppo.teacher = {shown(ppo.teacher)})")
        check_text("ppo", ppo)
        check_agent_spec("ppo.teacher", ppo.teacher)
    if env != "midrange" and ppo.mirror:
        raise ConfigError(f"ppo.mirror needs an env that says what its mirror image is (the air-combat "
                          f"sim does); {env} does not")
    for name in ("entropy_weights", "teacher_weights"):
        weights = getattr(ppo, name)
        if env == "midrange" and weights:
            components = ActionSpec.for_sim(config.sim).dim
            if len(weights) != components:
                raise ConfigError(f"ppo.{name} has {len(weights)} values but the sim's "
                                  f"{config.sim.action_mode} actions have {components} components "
                                  "(rudder, throttle, fire; [] means 1 for each)")
    if config.samples_per_batch % ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches ({ppo.num_minibatches}) must divide the batch of "
            f"{config.samples_per_batch} samples (rollout_len × envs_per_actor × slots_per_batch)"
        )
    return dataclasses.replace(config, ppo=ppo)
