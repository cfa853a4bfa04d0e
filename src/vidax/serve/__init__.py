"""``vidax serve``: an HTTP video-generation service in the shape of OpenAI's ``/v1/videos`` API.

* :mod:`vidax.serve.fields` reads a request's fields into the call keywords the pipeline declares
  and spells an error's arguments as the fields.
* :mod:`vidax.serve.jobs` keeps the job records (SQLite, standard library) and the mp4 files in
  the jobs folder, and runs the jobs one at a time on a worker thread.
* :mod:`vidax.serve.app` is the ASGI app (starlette): the API and the page (``page.html``).
* :mod:`vidax.serve.command` runs it (uvicorn) for the ``vidax serve`` command, whose flags
  :func:`vidax.cli.serve` declares (the load flags shared with ``vidax generate``).
"""
