"""The shared grammar case file (tests/data/grammar/options.cases), read as the C test
(spank/tests/test_opts.c) reads it: its header documents the format."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "data" / "grammar" / "options.cases"
OPTIONS = ("accel", "arch", "energy", "tier", "image", "checkpoint", "migratable")
# The meaning keys of each option and their defaults ("count" of units is 0).
KEYS: dict[str, dict[str, str]] = {
    "accel": {"kind": "", "name": "", "count": "1", "units_milli": "0", "mem_mib": "0"},
    "arch": {"arch": ""},
    "energy": {"name": ""},
    "tier": {"name": ""},
    "image": {"name": "", "tag": ""},
    "checkpoint": {"path": ""},
    "migratable": {},  # a flag: no meaning beyond "given"
}
NUMERIC = {"count", "units_milli", "mem_mib"}
VALUE_MAX = 20000
_SIMPLE = {"\\": b"\\", '"': b'"', "t": b"\t", "n": b"\n", "r": b"\r", "e": b"\x1b"}


class CaseFileError(ValueError):
    pass


@dataclass(frozen=True)
class Case:
    line: int
    option: str
    value: bytes
    ok: bool
    meaning: dict[str, str | int]  # every key of the option, defaults filled in (ok only)
    lists: dict[str, tuple[str, ...]] = field(default_factory=dict)  # energy/tiers in force

    def allowed(self) -> frozenset[str] | None:
        """The names energy/tier values must be among (None: any well-formed name)."""
        names = self.lists.get("energy" if self.option == "energy" else "tiers")
        return frozenset(names) if names else None


def unquote(text: str, pos: int) -> tuple[bytes, int]:
    """The quoted string at text[pos] ('"' there) and the position after it."""
    if text[pos:pos + 1] != '"':
        raise CaseFileError('a "quoted" value expected')
    out = bytearray()
    i = pos + 1
    while True:
        if i >= len(text):
            raise CaseFileError("unterminated quoted value")
        c = text[i]
        i += 1
        if c == '"':
            return bytes(out), i
        if c != "\\":
            out += c.encode("utf-8")
            continue
        e = text[i:i + 1]
        i += 1
        if e in _SIMPLE:
            out += _SIMPLE[e]
        elif e == "x":
            m = re.match(r"[0-9A-Fa-f]{2}", text[i:i + 2])
            if not m or int(m.group(), 16) == 0:
                raise CaseFileError("\\xHH needs two hex digits, not 00")
            out.append(int(m.group(), 16))
            i += 2
        elif e == "{":
            m = re.match(r"(\d+)\}", text[i:])
            if not m or not out or not 1 <= int(m.group(1)) <= VALUE_MAX:
                raise CaseFileError("\\{N} needs a byte before it and N from 1 to 20000")
            out += out[-1:] * (int(m.group(1)) - 1)
            i += m.end()
        else:
            raise CaseFileError(f"unknown escape \\{e}")


def _word(text: str, pos: int) -> tuple[bytes, int]:
    if text[pos:pos + 1] == '"':
        value, end = unquote(text, pos)
        if end < len(text) and text[end] not in " \t":
            raise CaseFileError("a blank must follow a quoted value")
        return value, end
    m = re.compile(r'[^ \t"]*').match(text, pos)
    assert m is not None
    return m.group().encode("utf-8"), m.end()


def _lists(args: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for a in args:
        key, _, names = a.partition("=")
        key = key.lower()
        if key not in ("energy", "tiers") or key in out or not names:
            raise CaseFileError(f"bad @lists argument {a!r}")
        out[key] = tuple(n.lower() for n in names.split(","))
    return out


def parse(text: str, name: str = str(CASES)) -> list[Case]:
    cases: list[Case] = []
    lists: dict[str, tuple[str, ...]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        try:
            if line.startswith("@"):
                words = line.split()
                if words[0] != "@lists":
                    raise CaseFileError("unknown directive (only @lists)")
                lists = _lists(words[1:])
                continue
            option, _, rest = line.partition(" ")
            if option not in OPTIONS:
                raise CaseFileError(f"unknown option {option!r}")
            pos = len(line) - len(rest.lstrip(" \t"))
            if line[pos:pos + 1] != '"':
                raise CaseFileError('a "quoted" VALUE expected')
            value, pos = _word(line, pos)
            words = line[pos:].split(None, 1)
            if not words or words[0] not in ("ok", "reject"):
                raise CaseFileError("RESULT must be ok or reject")
            ok = words[0] == "ok"
            pos = line.index(words[0], pos) + len(words[0])
            given: dict[str, str] = {}
            while (pos := len(line) - len(line[pos:].lstrip(" \t"))) < len(line):
                if not ok:
                    raise CaseFileError("a rejected case has no meaning")
                m = re.compile(r"([a-z_]+)=").match(line, pos)
                if not m or m.group(1) not in KEYS[option] or m.group(1) in given:
                    raise CaseFileError("KEY=VALUE with a key of this option, once, expected")
                v, pos = _word(line, m.end())
                given[m.group(1)] = v.decode("latin-1")
            meaning: dict[str, str | int] = {}
            if ok:
                defaults = dict(KEYS[option])
                if option == "accel" and given.get("kind") == "units":
                    defaults["count"] = "0"
                for k, d in defaults.items():
                    text = given.get(k, d)
                    if k in NUMERIC and not text.isdigit():
                        raise CaseFileError(f"{k} must be a number")
                    meaning[k] = int(text) if k in NUMERIC else text
            cases.append(Case(n, option, value, ok, meaning, dict(lists)))
        except CaseFileError as e:
            raise CaseFileError(f"{name}:{n}: {e}") from None
    return cases


def load(path: Path = CASES) -> list[Case]:
    return parse(path.read_text(encoding="utf-8"), str(path))


Meaning = dict[str, str | int]


class LuaGrammar:
    """The bridge's own parsers (bridge.lua, loaded on its own): option value -> meaning."""

    def __init__(self, source: str | None = None) -> None:
        """source: bridge.lua's text (default: as shipped)."""
        from slurm_hetero.bridge.luarun import JobSubmit

        self.js = JobSubmit.bridge() if source is None else JobSubmit(source, site={})
        self._call = self.js.lua.eval("function(f, ...) local got, why = f(...) return got, why end")
        self._allowed: dict[frozenset[str] | None, object] = {None: None}

    def parse(self, option: str, value: bytes,
              allowed: frozenset[str] | None = None) -> tuple[Meaning | None, str]:
        """(the meaning, "") when the value is accepted, else (None, why)."""
        fn = self.js.module[option]
        if option in ("energy", "tier"):
            if allowed not in self._allowed:
                self._allowed[allowed] = self.js.to_lua(dict.fromkeys(allowed or (), True))
            got, why = self._call(fn, value, self._allowed[allowed])
        else:
            got, why = self._call(fn, value)
        if got is None:
            return None, str(why)
        return {k: got[k] for k in KEYS[option]}, ""


def mismatch(case: Case, got: Meaning | None) -> str | None:
    """What is wrong with a parser's answer to a case (None: nothing)."""
    if case.ok and got is None:
        return "rejected, want accepted"
    if not case.ok and got is not None:
        return f"accepted as {got}, want rejected"
    if got is not None and got != case.meaning:
        return f"meaning {got}, want {case.meaning}"
    return None
