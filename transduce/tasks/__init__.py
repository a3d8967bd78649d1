"""Kinds of work: `TASKS` maps the `task` name a model declares to its `Task` class.

task = make_task(config, device, precision)    # the task of config.model_name's model
"""

from __future__ import annotations

import torch

from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.models import MODELS
from transduce.registry import lookup
from transduce.tasks.base import Candidate, Task, TaskData
from transduce.tasks.seq2seq import Seq2SeqTask
from transduce.tasks.tagging import TaggingTask

TASKS: dict[str, type[Task]] = {task.name: task for task in (Seq2SeqTask, TaggingTask)}


def task_class(config: configuration.Config) -> type[Task]:
    """The task that trains the configured model."""
    return lookup(TASKS, MODELS[config.model_name].task, "task")


def check_task(config: configuration.Config) -> type[Task]:
    """The task of the configured model; a `ConfigError` if the config does not suit it."""
    cls = task_class(config)
    problems = cls.check(config)
    if problems:
        raise ConfigError(problems[0])
    return cls


def make_task(config: configuration.Config, device: torch.device, precision: str = "fp32") -> Task:
    """The task of the configured model, after checking the config suits it."""
    return check_task(config)(config, device, precision)


__all__ = ["TASKS", "Candidate", "Task", "TaskData", "check_task", "make_task", "task_class"]
