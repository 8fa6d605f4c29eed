"""``gradient-explorer run``: one server (``exec``), or ``--replicas N`` behind HAProxy (:mod:`explorer.serve.replicas`)."""

from __future__ import annotations

import os
import sys

from explorer import serve
from explorer.serve import login as login_settings
from explorer.serve import replicas


def main(argv: list[str] | None = None) -> int:
    """Replace this process by the server (``exec``), so signals and the exit code are Streamlit's own; with
    ``--replicas`` or ``--auth``, run the replica set in this process until it is stopped."""
    args, streamlit_args = serve.parse(sys.argv[1:] if argv is None else argv)
    try:
        login = login_settings.login_environment(
            args.login, args.secrets, args.max_session_hours, args.allow, replicas=bool(args.replicas or args.auth)
        )
    except ValueError as error:
        print(f"gradient-explorer run: {error}", file=sys.stderr)
        return 2
    if args.replicas or args.auth:
        return replicas.main(args, streamlit_args, login)
    server_argv, env = serve.command(args.ops, streamlit_args, share=args.share, login=login, runs=args.runs)
    address = serve.flag_value(server_argv, "server.address") or serve.file_setting("server.address")
    port = serve.flag_value(server_argv, "server.port") or serve.file_setting("server.port")
    print(serve.reach_line(address, port, login=bool(login)))
    if login:
        print(login_settings.startup_line(login))
    sys.stdout.flush()
    os.execve(server_argv[0], server_argv, env)
    return 0  # not reached
