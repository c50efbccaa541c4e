"""Django's task API, wherever this Django has it: ``django.tasks`` (Django 6 and
later), else the ``django-tasks`` backport (Django 5.2). The names kiln's backend uses,
from one place; nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING

import django

# mypy reads the backport (typed); Django 6's module has the same names
if TYPE_CHECKING or django.VERSION < (6, 0):
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    SOURCE = "django_tasks"

else:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task, TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    SOURCE = "django.tasks"

__all__ = [
    "SOURCE", "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY", "BaseTaskBackend", "InvalidTaskError",
    "Task", "TaskContext", "TaskError", "TaskResult", "TaskResultDoesNotExist",
    "TaskResultStatus", "normalize_json", "task_backends", "task_enqueued", "task_finished",
    "task_started",
]
