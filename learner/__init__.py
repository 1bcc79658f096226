"""PPO learner: actor-critic network, advantage estimation, the PPO update, checkpoints and data
parallel. Usable on its own in a plain synchronous loop (see :mod:`learner.gym_loop`)."""

from learner.batch import RolloutBatch
from learner.network import ActorCritic
from learner.ppo import NonFiniteError, PPOLearner
from learner.ppo_config import PPOConfig
from learner.spaces import ActionSpec

__all__ = ["ActionSpec", "ActorCritic", "NonFiniteError", "PPOConfig", "PPOLearner", "RolloutBatch"]
