"""What ``vidax serve`` (:mod:`vidax.cli.serving`) checks before it loads: the access a
``--host`` needs (:func:`check_access`), the preset every job runs under (:func:`plan_preset`)
and the socket it listens on (:func:`listen`)."""

from __future__ import annotations

import socket
from typing import Any

import typer


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` only."""
    from vidax.errors import Arg, InputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        raise InputError(
            Arg("host", host), " ", Arg("port", port), f": cannot listen there ({e.strerror or e})"
        ) from None
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (``localhost``,
    ``127.0.0.0/8``, ``::1``); a wildcard (``0.0.0.0``, ``::``) or any other address is not."""
    import ipaddress

    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _check_resolves(host: str) -> None:
    """Refuse a ``host`` that is neither an IP address nor a name this machine resolves to one
    (``not_a_host``), before anything else is said about it.

    Raises:
        InputError: naming ``--host``, its value and what is valid.
    """
    import ipaddress

    from vidax.errors import Arg, InputError

    try:
        ipaddress.ip_address(host.strip("[]"))
        return
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise InputError(
            Arg("host", host),
            f" is not an IP address and does not resolve to one ({reason}); give an address of this machine "
            "(127.0.0.1, 0.0.0.0 for every IPv4 interface, ::1, ::) or a host name that resolves",
        ) from None


def check_access(host: str, api_key: str | None, insecure_no_auth: bool) -> str | None:
    """The API key the server requires (None: none), after refusing a non-loopback ``host``
    without one.

    Raises:
        InputError: ``host`` is not an address nor a name that resolves to one; ``host`` is
            reachable from other machines and no key is set, nor ``insecure_no_auth``; an empty key.
    """
    from vidax.errors import Arg, InputError

    if api_key is not None and not api_key.strip():
        raise InputError(
            Arg("api_key"), " is empty; give a secret of some length (or leave it unset on a loopback --host)"
        )
    _check_resolves(host)
    if api_key is None and not insecure_no_auth and not is_loopback(host):
        raise InputError(
            Arg("host", host),
            " is reachable from other machines and no API key is set: anyone who "
            "reaches it could run jobs; set one with --api-key KEY or the VIDAX_API_KEY environment "
            "variable (clients then send 'Authorization: Bearer KEY'), or pass --insecure-no-auth to "
            "serve it open anyway",
        )
    return api_key


def plan_preset(plan: Any, preset: str | None, loras: Any = ()) -> tuple[Any, Any]:
    """``(plan, recognised)``: ``plan`` with the preset every job of the server runs under its fields: ``preset``
    (``--preset``), else the one the checkpoint's configs or a LoRA file of ``loras`` call for
    (:func:`~vidax.pipelines.presets.recognise`), said in one line on stderr as ``vidax generate``
    says it; ``recognised``: that recognition's ``(preset, why)``, None where ``--preset`` was
    given or nothing calls for one (:class:`~vidax.serve.jobs.JobRunner` warns about the jobs
    that run a recognised distilled recipe with many steps and CFG).

    Raises:
        InputError: ``preset`` is not a preset of the checkpoint's family (naming ``--preset``).
    """
    from vidax.pipelines.presets import recognise, with_preset

    recognised = None if preset is not None else recognise(plan, loras)
    if recognised is not None:
        typer.echo(f"{recognised[1]}: --preset {recognised[0].name}", err=True)
        preset = recognised[0].name
    return with_preset(plan, preset, "--preset"), recognised
