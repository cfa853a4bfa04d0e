"""The click commands vidax's commands are made of and how their errors name arguments:
:class:`NumberCommand` (number flags read by one rule), :class:`GenerateCommand` (one flag per
declared call keyword) and :class:`Spelling` (an argument named as the flag that sets it)."""

from __future__ import annotations

import logging
import sys
from typing import Optional

import typer
from typer.core import TyperCommand

from vidax.cli.flags import call_options, frame_rate_words


def setup_logging(verbose: bool) -> None:
    """Log lines on stderr: vidax's INFO lines with ``verbose`` (--verbose), else warnings only."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # JAX logs every backend it probes and cannot start (no libtpu on a CPU machine) at INFO.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)


def fail(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr and exit with status 2 (a bad argument)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


#: The keywords of vidax's functions that ``generate``'s own flags set, where the flag is not
#: the keyword's name (the others are: ``dtype`` is ``--dtype``).
KEYWORD_FLAGS = {
    "timeout_s": "--distributed-timeout",
    "memory_check": "--no-memory-check",
    "decode_audio": "--no-audio",
    "weight_dtype": "--weights",
}


class NumberCommand(TyperCommand):
    """A typer command whose number flags (int or float) are read by one rule,
    :func:`vidax.errors.typed_number` (``16.0`` and ``1e3`` are integers; ``2.50``, ``1_0``,
    ``0x10`` are refused), before typer parses them: a text that spells no number of the flag's
    kind is one error line naming the flag, what is valid and the text as typed
    (``--num-inference-steps must be a positive integer, got 2.50``), not typer's usage error,
    which shows no value. The arguments as typed are ``ctx.meta["argv"]`` (the values errors echo,
    :class:`Spelling`)."""

    def valid(self, param) -> str:
        """What ``param``'s flag takes, in words."""
        return "an integer" if _kind(param) is int else "a number"

    def bounded(self, param) -> bool:
        """Whether :meth:`valid` gives the largest value (then int64's is not said)."""
        return False

    def parse_args(self, ctx: typer.Context, args: list) -> list:
        ctx.meta["argv"] = list(args)
        numbers = {opt: p for p in self.get_params(ctx) if _kind(p) is not None for opt in p.opts}
        return super().parse_args(ctx, [_read_number(args, i, numbers, self) for i in range(len(args))])


def _kind(param) -> type | None:
    """``int`` or ``float`` for an option taking one number (typer names its type), else None."""
    if getattr(param, "param_type_name", "") != "option" or param.is_flag or param.multiple:
        return None
    return {"int": int, "float": float}.get(str(param.bare_type()))


def _read_number(args: list, i: int, numbers: dict, command: NumberCommand) -> str:
    """``args[i]``, or where it is the value of a number flag (``--seed 1e3``, ``--seed=1e3``)
    the number it spells in Python's digits (``--seed 1000``); exits with the one error line of
    :class:`NumberCommand` where it spells none."""
    from vidax.errors import MAX_TYPED_INT, typed_number

    flag, eq, text = args[i].partition("=")
    if eq and flag in numbers:
        param = numbers[flag]
    elif i > 0 and args[i - 1] in numbers and args[i - 1] != "--":
        param, flag, eq, text = numbers[args[i - 1]], args[i - 1], "", args[i]
    else:
        return args[i]
    number = typed_number(text, integer=_kind(param) is int)
    if number is None or _kind(param) is int and isinstance(number, float):  # a float here: an integer past int64
        cap = "" if number is None or command.bounded(param) else f" (at most {MAX_TYPED_INT} in magnitude)"
        fail(f"{param.opts[0]} must be {command.valid(param)}{cap}, got {text}")
    return f"{flag}={number!r}" if eq else repr(number)


class GenerateCommand(NumberCommand):
    """``vidax generate``: typer's command plus one flag per call keyword of :func:`call_options`,
    added when first asked for (``--help`` or a run). Their values reach the command as
    ``ctx.meta["call"]`` (name -> value, None where not given), taken out of the parsed flags by
    :meth:`parse_args` (typer hands the command's function only the keywords of its signature)."""

    def declared(self) -> list:
        """The flags of the declared call keywords (in :attr:`params` from the first call on)."""
        if not hasattr(self, "_declared"):
            self._declared = declared_params(call_options().values())
            self.params[:0] = self._declared
        return self._declared

    def get_params(self, ctx: typer.Context) -> list:
        self.declared()
        return super().get_params(ctx)

    def parse_args(self, ctx: typer.Context, args: list) -> list:
        rest = super().parse_args(ctx, args)
        ctx.meta["call"] = {p.name: ctx.params.pop(p.name) for p in self.declared()}
        return rest

    def valid(self, param) -> str:
        """What a flag takes, in words: a call keyword's as its declaration says (``--fps``: the
        frame rates of :data:`~vidax.pipelines.options.FRAME_RATE_RANGE`)."""
        from vidax.pipelines.base import MAX_SEED

        option = call_options().get(param.name)
        if param.name == "seed":
            return f"an integer in [0, {MAX_SEED}]"
        return (
            option.describe_valid()
            if option is not None
            else frame_rate_words()
            if param.name == "fps"
            else super().valid(param)
        )

    def bounded(self, param) -> bool:
        option = call_options().get(param.name)
        if param.name in ("fps", "seed"):
            return True
        return option is not None and (option.high is not None or option.choices is not None)


def declared_params(options) -> list:
    """typer's options for declared call keywords (:class:`~vidax.pipelines.options.CallOption`),
    made by typer from a signature holding one ``typer.Option`` per keyword: a bool keyword is
    ``--x/--no-x``; a file kind takes the file's path."""
    import inspect

    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE

    params = []
    for o in options:
        names = [f"{o.flag_name}/--no-{o.flag_name[2:]}" if o.type is bool else o.flag_name, *o.short]
        default = f" [default: {o.default}]" if o.default and o.cli_default is None else ""
        kind = str if o.type in (IMAGE_FILE, VIDEO_FILE) or o.cli is not None else o.type
        option = typer.Option(
            ... if o.required else o.cli_default,
            *names,
            help=o.help + default,
            show_default=o.cli_default is not None,
            metavar=None
            if o.type is bool
            else "FILE"
            if o.type in (IMAGE_FILE, VIDEO_FILE)
            else "N[,N]"
            if o.cli
            else o.name.upper(),  # as argparse names a value: --num-frames NUM_FRAMES
        )
        params.append(
            inspect.Parameter(
                o.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=option,
                annotation=kind if o.required else Optional[kind],
            )
        )

    def flags(**values):
        return values

    flags.__signature__ = inspect.Signature(params)
    holder = typer.Typer(add_completion=False)
    holder.command()(flags)
    return list(typer.main.get_command(holder).params)


class Spelling:
    """How a command's errors and warnings name arguments: an :class:`~vidax.errors.Arg` as the
    flag that sets it (``--num-inference-steps 0``), as in Python where no flag does."""

    def __init__(self, command, argv: list | None = None) -> None:
        if isinstance(command, GenerateCommand):
            command.declared()
        options = [p for p in command.params if getattr(p, "param_type_name", "") == "option"]
        self.flags = {p.name: p.opts[0] for p in options if p.opts[0].startswith("--")}
        self.flags.update(KEYWORD_FLAGS)
        # keywords whose flag spells a list as "28,29" (--stg-blocks): their values echoed so
        self.listed = (
            {o.name for o in call_options().values() if o.cli is not None}
            if isinstance(command, GenerateCommand)
            else set()
        )
        # the text typed after each flag (``argv``: the command's arguments), by the flag's first spelling
        first = {opt: p.opts[0] for p in options for opt in p.opts}
        self.typed: dict[str, str] = {}
        for i, token in enumerate(argv or []):
            flag, eq, text = token.partition("=")
            if flag in first and (eq or i + 1 < len(argv)):
                self.typed[first[flag]] = text if eq else argv[i + 1]

    def __call__(self, arg) -> str:
        from vidax.errors import ArgValue

        flag = self.flags.get(arg.name)
        typed = self.typed.get(flag)  # a number is echoed as typed (1e30), not as Python writes it (1e+30)
        if isinstance(arg, ArgValue):  # the value alone ("got 1e39")
            return arg.shown_as(typed)
        if flag is not None and arg.name in self.listed and isinstance(arg.value, (list, tuple)):
            return f"{flag} {','.join(map(str, arg.value))}"
        return str(arg) if flag is None else arg.spelled(flag, typed)

    def message(self, error: BaseException) -> str:
        """An error's message, the arguments a vidax error names spelled as flags."""
        from vidax.errors import VidaxError

        return error.render(self) if isinstance(error, VidaxError) else str(error)

    def filter(self, record: logging.LogRecord) -> bool:
        """A logging filter: the record's :class:`~vidax.errors.Arg` / :class:`~vidax.errors.Message`
        arguments named as flags ("num_frames=7 is not ..." -> "--num-frames 7 is not ...")."""
        from vidax.errors import Arg, Message

        if isinstance(record.args, tuple):
            record.args = tuple(
                self(a) if isinstance(a, Arg) else a.render(self) if isinstance(a, Message) else a for a in record.args
            )
        return True
