"""``vidax serve``: an HTTP video-generation service in the shape of OpenAI's ``/v1/videos`` API.

* :mod:`vidax.serve.fields` reads a request's fields into the call keywords the pipeline declares
  and spells an error's arguments as the fields.
* :mod:`vidax.serve.store` keeps the job records (SQLite, standard library) and the saved
  denoising states in the jobs folder; :mod:`vidax.serve.records` a record's changes and event
  lines.
* :mod:`vidax.serve.jobs` runs the jobs alone or in batches on a worker thread, writing the mp4
  files in the jobs folder, and queues them again (and resumes a running batch) after a restart.
* :mod:`vidax.serve.preview` makes a running job's preview images (its clean-sample estimate
  through a latent-to-RGB map fit to the checkpoint's VAE).
* :mod:`vidax.serve.app` is the ASGI app (starlette): the API (API-key check, server-sent
  events of a job's progress) and the page (``page.html``).
* :mod:`vidax.serve.command` checks what the ``vidax serve`` command needs before it loads (the
  access a --host needs, the preset, the listening socket); :mod:`vidax.cli.serving` runs it
  (uvicorn) with the flags :func:`vidax.cli.serve` declares (the load flags shared with
  ``vidax generate``).
"""
