"""Tandem's declarative CI pipeline.

`ci/pipeline.toml` declares the steps once; `python -m ci` lists their jobs (step x
engine), selects the ones a change affects, runs them locally, and generates the GitHub
workflow and tox.ini. The noxfile derives its sessions from the same steps.
"""

from __future__ import annotations

from ci.config import PIPELINE, PipelineError, load, parse
from ci.model import Job, Pipeline, Settings, Step

__all__ = ["PIPELINE", "Job", "Pipeline", "PipelineError", "Settings", "Step", "load", "parse"]
