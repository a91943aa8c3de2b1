"""``opsctl console``: sign in to the operator console (issue 37, point 5; ADR 0045).

``link`` asks the operator service, with the operator's own key (as
``opsctl operations`` does), for a one-time sign-in link in the name of
``--as`` (default: the login name), and prints it:
``<gateway>/console/sign-in#link=<secret>``. It works once, for ten minutes,
and opens a console session of eight hours. The gateway's address is
``--url``, else the one the running ``opsctl up`` wrote to ``var/stack.json``,
else ``OPS_GATEWAY_BIND``'s (``http://127.0.0.1:8080/`` by default). ``revoke``
ends every console link and session of an operator at once: your own (the name
``--as`` gives), ``--operator`` NAME's, or with ``--all`` every operator's.

Only argparse and pure modules are imported here at load; grpc when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operator import operator_name

if TYPE_CHECKING:
    from durable_ops.settings import Settings

DEFAULT_GATEWAY_URL = "http://127.0.0.1:8080/"
SIGN_IN_PATH = "console/sign-in"
CALL_TIMEOUT_SECONDS = 10.0

HELP = """\
link    print a one-time sign-in link to the operator console (works once, for 10 minutes)
revoke  end every console link and session of an operator (default: yours; --all: everyone's)

Signs with the operator key (OPS_SERVICE_KEY, else var/keys/operator/operator.key) and
calls the Operations service as opsctl operations does (--target, OPS_OPERATIONS_TARGET,
var/stack.json, 127.0.0.1:50051). Every console action is logged with the name the link
was made for (--as, default: your login name)."""


def add_parser(console: argparse.ArgumentParser) -> None:
    verbs = console.add_subparsers(dest="console_command", required=True, metavar="COMMAND")
    link = verbs.add_parser(
        "link",
        help="print a one-time sign-in link to the operator console",
        description="Print a link that signs its opener in to the operator console as --as."
        " It works once, for ten minutes; the session it opens lasts eight hours or until"
        " Sign out. Open it yourself: whoever opens it acts in your name.",
    )
    link.add_argument(
        "--url",
        metavar="URL",
        help="the gateway's address as your browser reaches it (default: the running opsctl"
        " up's, from var/stack.json, else OPS_GATEWAY_BIND's, a wildcard bind on loopback,"
        f" else {DEFAULT_GATEWAY_URL})",
    )
    link.add_argument("--json", action="store_true", help="machine-readable output")
    revoke = verbs.add_parser(
        "revoke",
        help="end every console link and session of an operator",
        description="End at once every console sign-in link and session of one operator:"
        " by default your own (the name --as gives, default your login name), else"
        " --operator NAME's; or, with --all, of every operator.",
    )
    whose = revoke.add_mutually_exclusive_group()
    whose.add_argument(
        "--operator", dest="whose", metavar="NAME", help="whose sign-ins (default: your own)"
    )
    whose.add_argument(
        "--all", dest="everyone", action="store_true", help="every operator's (a stolen key)"
    )
    for sub in (link, revoke):
        sub.add_argument(
            "--as", dest="operator", metavar="NAME", help="who you are (default: login name)"
        )
        sub.add_argument(
            "--target",
            metavar="HOST:PORT",
            help="the Operations service (default: OPS_OPERATIONS_TARGET, else the running"
            " opsctl up from var/stack.json, else 127.0.0.1:50051)",
        )


def gateway_url(
    flag: str | None, bind: str, stack: Path | None = None, *, flag_name: str = "--url"
) -> str:
    """Where the browser reaches the gateway, ending in ``/``: ``--url``, else the running
    ``opsctl up``'s (``stack``, default ``var/stack.json``), else ``bind``
    (``OPS_GATEWAY_BIND``; a wildcard bind is reached on loopback).

    ``ArgumentTypeError`` for a ``flag`` that is not an http(s) address, naming it as the
    command spells it (``flag_name``: ``opsctl status`` says ``--gateway-url``),
    ``ValueError`` for a ``bind`` that is not HOST:PORT.
    """
    from durable_ops.stack import address_file
    from durable_ops.stack.binds import parse_address

    if flag:
        parts = urlsplit(flag)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise argparse.ArgumentTypeError(f"{flag_name} {flag!r} is not an http(s) address")
        return flag if flag.endswith("/") else flag + "/"
    running = address_file.read(stack or address_file.STACK_PATH)
    found = running.get("gateway_url") if running else None
    if isinstance(found, str) and found:
        return found
    return f"http://{parse_address('gateway_bind', bind).dialled}/"


def _whose(flag: str | None) -> str:
    """``revoke --operator NAME``'s name; "" (the caller's own) when not given. Given empty,
    it is refused rather than read as "not given"."""
    if flag is None:
        return ""
    try:
        return operator_name(flag)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(f"--operator {exc.reason}") from None


def sign_in_link(base: str, secret: str) -> str:
    """The address the operator opens: the secret in the fragment, which no request sends."""
    return f"{base}{SIGN_IN_PATH}#link={secret}"


def run(
    args: argparse.Namespace,
    settings: Settings,
    out: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    import grpc

    from durable_ops.api.operator.v1 import operator_pb2 as opb
    from durable_ops.operator_cli import _connect, _name, failed_call
    from durable_ops.stack.address_file import choose_target

    out = sys.stdout if out is None else out
    where = f"opsctl console {args.console_command}"
    target = choose_target(
        "operations_target", args.target, os.environ if environ is None else environ
    )
    settings = replace(settings, operations_target=target.address)
    try:
        name = _name(args)
        base = gateway_url(getattr(args, "url", None), settings.gateway_bind)
        whose = _whose(getattr(args, "whose", None))
        operator = _connect(settings, name)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.console_command == "revoke":
            ended = operator.stub.EndOperatorSessions(
                opb.EndOperatorSessionsRequest(operator=whose, everyone=args.everyone),
                metadata=operator.metadata,
                timeout=CALL_TIMEOUT_SECONDS,
            )
            of = "every operator" if args.everyone else whose or name
            print(f"Ended {ended.ended} console sign-in(s) of {of}.", file=out)
            return 0
        made = operator.stub.CreateConsoleLink(
            opb.CreateConsoleLinkRequest(), metadata=operator.metadata, timeout=CALL_TIMEOUT_SECONDS
        )
    except grpc.RpcError as exc:
        return failed_call(exc, operator.channel, target, where)
    finally:
        operator.channel.close()
    link = sign_in_link(base, made.link_secret)
    expires = made.expires_at.ToDatetime(tzinfo=UTC)
    if args.json:
        answer = {"link": link, "operator": made.operator, "expires_at": expires.isoformat()}
        print(json.dumps(answer), file=out)
        return 0
    print(
        f"Operator console sign-in for {made.operator} (works once, until"
        f" {expires:%H:%M:%S} UTC):\n\n  {link}\n\nOpen it yourself; whoever opens it"
        " acts in your name.",
        file=out,
    )
    return 0
