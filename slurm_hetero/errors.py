"""Error types shared by the library; the CLI maps them to exit codes (2 input, 1 runtime)."""

from __future__ import annotations


class HeteroError(Exception):
    """Base class of errors the CLI reports without a traceback."""

    exit_code = 1


class InputError(HeteroError):
    """The user gave us something invalid (a file, a field, an option): exit status 2."""

    exit_code = 2


class RuntimeFailure(HeteroError):
    """Something we ran failed (a daemon, a Slurm command): exit status 1."""

    exit_code = 1
