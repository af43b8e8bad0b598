"""The project's one jinja environment (every rendered file: Slurm configs, Lua, units,
the HTML report) and the encoders its templates use to write values safely.

Strict undefined (a missing variable is an error, never an empty string); `sh` quotes a
value as one shell word; `lua_str` writes a Lua 5.1 string literal (not `tojson`: Lua 5.1
has no `\\u` escape).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"


def lua_long_string(text: str) -> str:
    """text as a Lua long-bracket literal whose closing bracket cannot occur inside it."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[\n{text}]{eq}]"


_LUA_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def lua_str(text: str) -> str:
    r"""text as a Lua 5.1 string literal (double-quoted) of its UTF-8 bytes.

    Printable ASCII stays as it is, except `\` and `"`; newline, CR and tab become `\n`,
    `\r`, `\t`; every other byte a three-digit decimal escape, the only numeric escape
    Lua 5.1 has (`\u00fc`, as JSON writes it, would read as `u00fc`). The jinja filter
    `lua_str` of the rendered Lua files.

    >>> print(lua_str('say "hi"\n'))
    "say \"hi\"\n"
    >>> print(lua_str("/données"), lua_str("a\\b"), lua_str("\x1b[0m"))
    "/donn\195\169es" "a\\b" "\027[0m"
    """
    if not isinstance(text, str):
        raise TypeError(f"lua_str takes a str, not {type(text).__name__}: {text!r}")
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        out.append(_LUA_ESCAPES.get(c) or (c if 32 <= b < 127 else f"\\{b:03d}"))
    return '"' + "".join(out) + '"'


def environment(autoescape: bool = False) -> jinja2.Environment:
    """The environment over the package's templates; `autoescape` for HTML."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=not autoescape,
        lstrip_blocks=not autoescape,
        autoescape=autoescape,
    )
    env.filters["sh"] = shlex.quote  # a path in a rendered shell script, one word whatever it holds
    env.filters["lua_str"] = lua_str  # a string in rendered Lua 5.1
    return env
