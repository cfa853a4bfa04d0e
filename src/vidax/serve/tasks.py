"""The pipeline each task of a ``vidax serve`` request runs on (:class:`TaskPipes`): the loaded
one, or the class that runs the task on the checkpoint built over the loaded weights."""

from __future__ import annotations

import threading
from typing import Any

from vidax.checkpoint import TASK_NAMES
from vidax.pipelines.presets import presets_of
from vidax.serve.fields import Fields, RequestError

#: The request fields that ask for a task, with the task and the call keyword each gives.
TASK_FIELDS = (("input_reference", "i2v", "image"), ("input_video", "v2v", "video"))


class TaskPipes:
    """The pipelines of the tasks of one loaded pipeline ``pipe``, named ``model`` in errors."""

    def __init__(self, pipe: Any, model: str):
        self.pipe, self.model = pipe, model
        self.cls, self.info = type(pipe), pipe.info
        self._pipes = {self.cls: pipe}  # the pipeline of each class built so far
        self._lock = threading.Lock()

    def class_for(self, task: str) -> type:
        """The class that runs ``task`` (``"t2v"``, ``"i2v"``, ``"v2v"``) on the checkpoint, as
        ``vidax generate`` picks it (``class_for_task``): the loaded class for its own task and
        for a task the checkpoint does not do (its checks refuse the request)."""
        if task == self.cls.family.task or task not in self.info.tasks:
            return self.cls
        return self.cls.class_for_task(task)

    def pipe_for(self, task: str) -> Any:
        """The pipeline of :meth:`class_for` ``task``: the loaded one, or its class built over
        the loaded modules once (:func:`~vidax.pipelines.loading.from_pipe`, no weight read)."""
        from vidax.pipelines.loading import from_pipe

        cls = self.class_for(task)
        with self._lock:
            if cls not in self._pipes:
                self._pipes[cls] = from_pipe(cls, self.pipe)
            return self._pipes[cls]

    def request_pipe(self, fields: dict[str, Any], image: bool) -> Any:
        """The pipeline of a request's task: image-to-video with an image (``image``: an
        ``input_reference`` was sent), video-to-video with an ``input_video``, else text-to-video.

        Raises:
            RequestError: 400, both an image and a video.
        """
        video = fields.get("input_video") is not None
        if image and video:
            raise RequestError(
                400, "input_reference and input_video are both given: give the image or the video", "input_video"
            )
        return self.pipe_for("i2v" if image else "v2v" if video else "t2v")

    def check_inputs(self, request: Fields, cls: type) -> None:
        """Refuse an image or a video that ``cls`` (the request's class) does not take.

        Raises:
            RequestError: 400 naming the field and the tasks the checkpoint does.
        """
        for field, task, keyword in TASK_FIELDS:
            if field in request.given and (keyword not in cls.call_args() or task not in self.info.tasks):
                raise RequestError(
                    400,
                    f"{field} is given but {self.model} does not do {TASK_NAMES[task]} "
                    f"(it does {', '.join(self.info.tasks)})",
                    field,
                )

    def accepted(self) -> list[str]:
        """The request fields of every task the checkpoint does (``GET /v1/models``)."""
        names: list[str] = []
        presets = bool(presets_of(self.cls))
        for task in self.info.tasks:
            cls = self.class_for(task)
            fields = Fields(
                {}, cls.options(), self.info.defaults.fps, cache=cls.family.cache_reference, presets=presets
            )
            names += [n for n in fields.accepted() if n not in names]
        return names
