"""The sim actors of a run, built from its config: the actor around a policy replica, and its
opponent and reward. Used in the main process and in actor processes
(``pipeline/run/actor_process_child.py``)."""

from __future__ import annotations

from typing import Any

import torch

from actors.sim_actor import SimActor
from agents.base import BaseAgent
from agents.scripted import ScriptedAgent, most_urgent_missile
from learner import ActionSpec, ActorCritic
from learner.teacher import Teacher
from pipeline.config import ConfigError, PipelineConfig
from pipeline.config.specs import build_agent, make_reward
from pipeline.league.matchmaking import League
from rewards.base import BaseReward
from sim import ObsLayout, SimConfig
from sim.reach.missile import SPENT_SPEED_MPS


def make_sim_actor(cfg: PipelineConfig, layout: ObsLayout, device: torch.device, actor_id: int,
                   seed: int, policy: ActorCritic, league: League | None, cuda_graph: bool = False,
                   stream: torch.cuda.Stream | None = None) -> SimActor:
    """A sim actor of this run's config around ``policy`` (its replica): opponent (a league's
    grouped opponent when ``league`` is given) and reward built from their specs. Used in the
    main process and in actor processes (``pipeline.run.actor_process``)."""
    opponent, reward = make_opponent_and_reward(cfg, layout, device, seed, league, cuda_graph)
    return SimActor(
        actor_id, cfg.sim, cfg.actors.envs_per_actor, cfg.actors.rollout_len, policy, opponent, reward,
        device=device, seed=seed, learning_side=cfg.actors.learning_side,
        cuda_graph=cuda_graph, compile_sim=cfg.run.compile_sim, stream=stream,
        compile_step=cfg.run.compile_step and device.type == "cpu",
    )


def make_opponent_and_reward(cfg: PipelineConfig, layout: ObsLayout, device: torch.device, seed: int,
                             league: League | None, select_on_device: bool = False
                             ) -> tuple[BaseAgent, BaseReward]:
    """An actor's opponent and reward from their specs; whatever goes wrong is a one-line
    ``ConfigError`` (the main process also calls it once before starting actor processes, so
    a bad spec is refused at the boundary, not in a child)."""
    B = cfg.actors.envs_per_actor

    def agent_from_spec(spec: str, num_envs: int, agent_seed: int) -> BaseAgent:
        agent = build_agent(spec, num_envs, layout, device, seed=agent_seed,
                            action_mode=cfg.sim.action_mode, sim_config=cfg.sim).eval()
        if cfg.run.compile_agents and isinstance(agent, ScriptedAgent):
            agent.compile()
        return agent

    try:
        if league is not None:
            opponent: BaseAgent = league.make_opponent(B, agent_from_spec, device, seed,
                                                       select_on_device=select_on_device)
        else:
            opponent = agent_from_spec(cfg.actors.opponent, B, seed)
        reward = make_reward(cfg.actors.reward, device, layout, cfg.sim)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except Exception as exc:  # a plug-in's constructor: its error, in one line
        raise ConfigError(f"building the opponent {cfg.actors.opponent!r} or the reward "
                          f"{cfg.actors.reward!r} raised {type(exc).__name__}: {exc}") from None
    return opponent, reward


def make_teacher(cfg: PipelineConfig, layout: ObsLayout, device: torch.device) -> Teacher:
    """The learner's kickstarting teacher from ``ppo.teacher`` (any agent spec), taking its most
    likely actions. Agents act on a fixed number of environments, so one is built per batch size
    the learner hands it (a run's last batch may hold fewer chunks), the full batch's at once: a
    bad spec is a one-line ``ConfigError`` here, not at the first update. With
    ``ppo.teacher_off_tti_s`` it also weighs each sample: ``ppo.teacher_defence_weight`` (0 by
    default) where a live inbound missile's time to impact is under it
    (:func:`agents.scripted.most_urgent_missile`, the scripted fighters' own threat), 1
    elsewhere."""
    spec = cfg.ppo.teacher
    agents: dict[int, BaseAgent] = {}

    def agent_for(n: int) -> BaseAgent:
        if n not in agents:
            if len(agents) >= TEACHER_SIZES:
                agents.clear()
            try:
                agents[n] = build_agent(spec, n, layout, device, seed=cfg.run.seed, action_mode=cfg.sim.action_mode,
                                        sim_config=cfg.sim, deterministic=True).eval()
            except ValueError as exc:
                raise ConfigError(f"ppo.teacher: {exc}") from None
            except Exception as exc:  # a plug-in's constructor: its error, in one line
                raise ConfigError(f"building the teacher {spec!r} raised {type(exc).__name__}: {exc}") from None
        return agents[n]

    agent_for(cfg.samples_per_batch)
    off_tti_s, defence_weight = cfg.ppo.teacher_off_tti_s, cfg.ppo.teacher_defence_weight

    def teach(obs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        actions = agent_for(obs.shape[0]).act(obs)
        if not off_tti_s:
            return actions
        tti, _, _, _ = most_urgent_missile(obs, layout, SPENT_SPEED_MPS)
        return actions, torch.where(tti >= off_tti_s, 1.0, defence_weight).to(obs.dtype)

    return teach


TEACHER_SIZES = 4
"""Batch sizes :func:`make_teacher` keeps an agent for (the full batch and a few partial ones)."""


def sim_mirror(sim: SimConfig) -> dict[str, list[Any]]:
    """The air-combat policy's mirror maps for ``sim``: the observation's signs and the head's
    map under the arena's mirror image (``ppo.mirror``; see ``learner.network.ActorCritic``)."""
    return {"obs_sign": list(ObsLayout.from_config(sim).mirror_signs),
            **ActionSpec.sim_mirror(ActionSpec.for_sim(sim))}
