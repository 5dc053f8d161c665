"""The ``rlx`` command line."""

from __future__ import annotations

import argparse
import sys

from rlx import _rlx


def _cmd_env(_args: argparse.Namespace) -> int:
    for name, default, meaning in _rlx.env_vars():
        print(f"{name:28} default={default!r:14} {meaning}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlx`` script."""
    p = argparse.ArgumentParser(prog="rlx", description="rlx ML compiler and runtime")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env", help="list the environment variables rlx reads").set_defaults(
        fn=_cmd_env
    )
    args = p.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
