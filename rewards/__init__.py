"""What the learning side is rewarded for: the reward interface, presets and the registry."""

from rewards.base import BaseReward, StepInfo, WeightedSum, step_info
from rewards.presets import (
    DrawReward,
    LaunchReward,
    OutcomeReward,
    ShapedConfig,
    ShapedReward,
    WastedLaunchReward,
    ZeroReward,
)
from rewards.registry import PRESETS, make_reward

__all__ = [
    "PRESETS",
    "BaseReward",
    "DrawReward",
    "LaunchReward",
    "OutcomeReward",
    "ShapedConfig",
    "ShapedReward",
    "StepInfo",
    "WastedLaunchReward",
    "WeightedSum",
    "ZeroReward",
    "make_reward",
    "step_info",
]
