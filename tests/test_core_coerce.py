"""core.coerce: plain data into a typed dataclass, every key and value checked by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from core.coerce import coerce


@dataclass(frozen=True)
class Engine:
    thrust: float = 1.0
    name: str = "basic"


def _strong() -> Engine:
    return Engine(thrust=5.0, name="strong")


@dataclass(frozen=True)
class Craft:
    flag: bool = False
    count: int = 1
    speed: float = 2.0
    label: str = "a"
    names: list[str] = field(default_factory=list)
    sizes: tuple[int, ...] = (1,)
    span: tuple[float, float] = (0.0, 1.0)
    options: dict[str, Any] = field(default_factory=dict)
    limit: float | None = None
    engine: Engine = field(default_factory=_strong)
    anything: Any = None


class Refused(ValueError):
    pass


def test_values_are_checked_and_converted_to_the_annotation():
    craft = coerce(Craft, {"flag": True, "count": 3, "speed": 4, "label": "b", "names": ("x", "y"),
                           "sizes": [8, 8], "span": [1, 2.5], "options": {"k": 1}, "limit": 0.5,
                           "anything": object})
    assert craft.flag is True and craft.count == 3 and craft.label == "b"
    assert craft.speed == 4.0 and type(craft.speed) is float
    assert craft.names == ["x", "y"] and craft.sizes == (8, 8) and craft.span == (1.0, 2.5)
    assert craft.options == {"k": 1} and craft.limit == 0.5 and craft.anything is object
    assert coerce(Craft, {}) == Craft()
    assert coerce(Craft, {"limit": None}).limit is None


def test_unknown_keys_are_refused_by_name_with_the_callers_message():
    with pytest.raises(ValueError, match=r"unknown craft field\(s\): colour, size"):
        coerce(Craft, {"size": 1, "colour": 2, "count": 1}, where="craft")
    with pytest.raises(Refused, match=r"unknown option\(s\) in \[run\]: bogus"):
        coerce(Craft, {"bogus": 1}, where="run", unknown="unknown option(s) in [{where}]: {names}",
               error=Refused)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flag": "yes"}, "flag must be true or false, got 'yes' (a string)"),
        ({"count": True}, "count must be an integer, got True (a boolean)"),
        ({"count": 1.5}, "count must be an integer, got 1.5 (a float)"),
        ({"speed": float("nan")}, "speed must be a finite number, got nan (a float)"),
        ({"speed": False}, "speed must be a finite number, got False (a boolean)"),
        ({"label": 3}, "label must be a string, got 3 (an integer)"),
        ({"names": "x"}, "names must be a list of strings, got 'x' (a string)"),
        ({"names": ["x", 1]}, "names[1] must be a string, got 1 (an integer)"),
        ({"sizes": [4, True]}, "sizes[1] must be an integer, got True (a boolean)"),
        ({"span": [1.0]}, "span must be a list of 2 numbers, got [1.0] (a list)"),
        ({"span": [1.0, float("inf")]}, "span[1] must be a finite number, got inf (a float)"),
        ({"options": []}, "options must be a table, got [] (a list)"),
        ({"limit": "none"}, "limit must be a finite number, got 'none' (a string)"),
        ({"engine": 3}, "engine must be a table, got 3 (an integer)"),
        ({"engine": {"thrust": "x"}}, "engine.thrust must be a finite number, got 'x' (a string)"),
        ({"engine": {"mass": 1}}, "unknown engine field(s): mass"),
        # A TOML integer too large for a float, a very long string, an undecodable argument.
        ({"speed": 10**400}, "speed must be a finite number, got 1" + "0" * 56 + "... (an integer)"),
        ({"label": "\udcff"}, "label must be a string, got '\\udcff' (a string)"),
        ({"count": "x" * 100}, "count must be an integer, got " + repr("x" * 100)[:57] + "... (a string)"),
    ],
)
def test_bad_values_are_named(data, message):
    with pytest.raises(Refused) as exc:
        coerce(Craft, data, error=Refused)
    assert str(exc.value) == message
    with pytest.raises(Refused) as exc:
        coerce(Craft, data, where="craft", error=Refused)
    named = message.replace("engine", "craft.engine") if message.startswith("unknown") else f"craft.{message}"
    assert str(exc.value) == named


def test_a_nested_table_completes_the_fields_default():
    assert coerce(Craft, {"engine": {"thrust": 7}}).engine == Engine(thrust=7.0, name="strong")
    assert coerce(Craft, {"engine": Engine()}).engine == Engine()
    assert coerce(Engine, {"name": "x"}, base=Engine(thrust=3.0)) == Engine(thrust=3.0, name="x")


def test_the_dataclass_checks_its_own_ranges_after_the_types():
    @dataclass(frozen=True)
    class Positive:
        value: float = 1.0

        def __post_init__(self) -> None:
            if self.value <= 0:
                raise ValueError(f"value must be > 0, got {self.value}")

    with pytest.raises(ValueError, match=r"value must be > 0, got -1\.0"):
        coerce(Positive, {"value": -1})


def test_the_three_configurations_share_it():
    from learner.ppo_config import PPOConfig
    from sim.config import SimConfig

    with pytest.raises(ValueError, match=r"unknown sim config field\(s\): substep_count"):
        SimConfig.from_dict({"substep_count": 3})
    with pytest.raises(ValueError, match=r"unknown fighter field\(s\): wings"):
        SimConfig.from_dict({"fighter": {"wings": 2}})
    with pytest.raises(ValueError, match="check_actions must be true or false, got 'yes'"):
        SimConfig.from_dict({"check_actions": "yes"})
    assert SimConfig.from_dict(SimConfig(time_scale=2.0).to_dict()) == SimConfig(time_scale=2.0)
    with pytest.raises(ValueError, match=r"unknown PPO config field\(s\): learnin_rate"):
        PPOConfig.from_dict({"learnin_rate": 1.0})
    with pytest.raises(ValueError, match=r"policy_bias\[1\] must be a finite number, got nan"):
        PPOConfig.from_dict({"policy_bias": [0, float("nan")]})
    assert PPOConfig.from_dict({"hidden_sizes": [8, 8]}).hidden_sizes == (8, 8)
