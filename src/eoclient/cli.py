"""The ``eoclient`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eoclient")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the reference server")
    parser.parse_args(argv)
    print("not built yet", file=sys.stderr)
    return 1
