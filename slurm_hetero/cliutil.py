"""What every CLI module shares: the console, the demo site, shared options, and the one
place where library errors become exit codes. Kept apart from cli.py so command groups that live next
to their library (reports, predict, containers) import it without a cycle."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from slurm_hetero.errors import HeteroError

F = TypeVar("F", bound=Callable[..., Any])
# Wide tables even when piped (make demo, CI logs); a terminal keeps its own width.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
DEMO_SITE = Path(__file__).resolve().parent.parent / "site" / "demo" / "site.yaml"


class _BadInput(click.ClickException):
    exit_code = 2


class _Failed(click.ClickException):
    exit_code = 1


def reports_errors(fn: F) -> F:
    """The one place library errors become exit codes: 2 bad input, 1 runtime failure."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HeteroError as e:
            raise (_BadInput if e.exit_code == 2 else _Failed)(str(e)) from e

    return wrapper  # type: ignore[return-value]


def site_option(fn: F) -> F:
    """`--site FILE` (into `site_path`), the demo site by default."""
    return click.option("--site", "site_path", type=click.Path(path_type=Path), default=str(DEMO_SITE),
                        help="Site file [default: the demo site]")(fn)


def required_site_option(fn: F) -> F:
    """`--site FILE` (into `site_path`) for commands that must not guess the site."""
    return click.option("--site", "site_path", type=click.Path(path_type=Path), required=True,
                        help="The site file the cluster is built from.")(fn)
