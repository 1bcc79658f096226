"""How the actors of a run on CUDA step, in one line for the run's start."""

from __future__ import annotations

from pipeline.config import PipelineConfig
from pipeline.run.parts import RunParts


def step_description(config: PipelineConfig, parts: RunParts, graph_actors: int) -> str:
    """How the actors step on CUDA: captured graphs or eager (and why), compiled sim or not."""
    n = len(parts.actors)
    text = (f"actor step: {graph_actors}/{n} actors replay a CUDA graph · sim "
            f"{'compiled' if config.run.compile_sim else 'eager'}")
    errors = sorted({a.graph_error for a in parts.actors if a.graph_error})
    if errors:
        text += " · capture failed: " + "; ".join(errors)
    return text
