"""``python -m vidax`` and the ``vidax`` command: the CLI, with Ctrl-C during its imports
ending like Ctrl-C before a run (exit 130, one line) instead of a traceback."""

import sys

from vidax.errors import INTERRUPTED


def run() -> None:
    try:
        from vidax.cli import main
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
