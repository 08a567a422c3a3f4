"""Tolaria: tasks and data, the single-env training environment, devices and the governor.

Tasks pair a dataset with its host and hyperparameters; `MorphogeneticEnv` trains one host an
epoch per step and executes one controller decision per step; the governor rolls an env back to
its last healthy epoch on NaN or a loss blow-up.
"""

from esper.tolaria.datasets import DatasetError, ImageData, TokenData
from esper.tolaria.devices import DeviceError, available_devices, resolve_device, use_deterministic_kernels
from esper.tolaria.environment import EnvConfig, MorphogeneticEnv, StepResult
from esper.tolaria.episode import Controller, EpisodeOutcome, run_episode
from esper.tolaria.governor import Governor, GovernorConfig
from esper.tolaria.seeds import SeedRecord
from esper.tolaria.tasks import DATA_DIR_ENV, DEFAULT_TASK, TASKS, TaskSpec, get_task

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_TASK",
    "TASKS",
    "Controller",
    "DatasetError",
    "DeviceError",
    "EnvConfig",
    "EpisodeOutcome",
    "Governor",
    "GovernorConfig",
    "ImageData",
    "MorphogeneticEnv",
    "SeedRecord",
    "StepResult",
    "TaskSpec",
    "TokenData",
    "available_devices",
    "get_task",
    "resolve_device",
    "run_episode",
    "use_deterministic_kernels",
]
