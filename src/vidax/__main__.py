"""``python -m vidax`` and the ``vidax`` command: SIGINT / SIGTERM are handled from the first
instruction (:class:`vidax.interrupt.Stop`, installed before typer or JAX is imported), then the
jax / flax pairing is checked and the CLI runs."""

from vidax.interrupt import Stop


def run() -> None:
    stop = Stop()
    stop.install()
    import vidax

    try:
        vidax._check_jax_flax()
    except ImportError as e:
        import sys

        print(e, file=sys.stderr)  # one line: "vidax: jax ... needs flax >= ...; run ..."
        raise SystemExit(2) from None
    from vidax.cli import main

    main(stop)


if __name__ == "__main__":
    run()
