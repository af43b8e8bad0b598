"""Differential fuzzer: the SPANK plugin's C checkers against the bridge's Lua parsers.

Both sides must accept the same option values with the same meaning (ONE grammar,
tests/data/grammar/options.cases, whose values seed the mutations). The C side is
spank/hetero_opts.c built as a shared object (`make -C spank lib`) and called through
ctypes; the Lua side is bridge.lua's grammar under lupa's Lua 5.1. Any disagreement is
printed as a line ready for the case file. The test suite runs it briefly with a fixed
seed (tests/lua/test_grammar_fuzz.py); longer by hand:

    .venv/bin/python -m tests.lua.grammar_fuzz --seconds 600 [--seed N]
"""

from __future__ import annotations

import argparse
import ctypes
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.lua import grammar_cases as G

ROOT = Path(__file__).resolve().parents[2]
SPANK = ROOT / "spank"
LIB = SPANK / "build" / "libhetero_opts.so"
# spank/hetero_opts.h
VALUE_MAX, NAME_MAX, POLICY_MAX, LIST_MAX, TAG_MAX, ERR_MAX = 256, 64, 32, 32, 128, 2048
KINDS = {0: "name", 1: "any", 2: "units"}
ARCHES = {0: "any", 1: "x86_64", 2: "aarch64"}
# plugstack lists the fuzzer draws from, as @lists lines of the case file give them
LISTS: tuple[dict[str, tuple[str, ...]], ...] = (
    {}, {"energy": ("performance", "balanced", "efficiency", "auto"), "tiers": ("diamond", "gold", "silver")},
    {"tiers": ("gold", "x-1")},
)
TOKENS = [b"units=", b",mem>=", b"mem>=", b"any", b":", b",", b".", b"/", b"=", b">=", b"0", b"1",
          b"9", b"00", b"0.", b".5", b"1024", b"1025", b"100000", b"100000.001", b"0.001", b"1048576",
          b"1048577", b"1125899906842624", b"18446744073709551616", b"K", b"M", b"G", b"T", b"B", b"kb",
          b"x86_64", b"aarch64", b"arm64", b"armv8", b"nvidia", b"a100-80gb", b"gold", b"auto", b"-",
          b"_", b" ", b"\t", b"\n", b"\x1b", b"\x7f", b"\xc3\xa9", b"\xff", b"e3", b"+", b"$(id)", b"::",
          b"/..", b"../", b"/./", b"//", b"(null)", b"null"]
ALPHABET = bytes(range(1, 256))


class HeteroList(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint), ("name", (ctypes.c_char * (POLICY_MAX + 1)) * LIST_MAX)]


class HeteroConf(ctypes.Structure):
    _fields_ = [("energy", HeteroList), ("tiers", HeteroList)]


class HeteroAccel(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("name", ctypes.c_char * (NAME_MAX + 1)),
                ("count", ctypes.c_uint), ("units_milli", ctypes.c_uint32), ("mem_mib", ctypes.c_uint64)]


class HeteroImage(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * (VALUE_MAX + 1)), ("tag", ctypes.c_char * (TAG_MAX + 1))]


def build_lib() -> Path:
    """spank/build/libhetero_opts.so, (re)built by make when hetero_opts.c changed."""
    subprocess.run(["make", "-s", "-C", str(SPANK), "lib"], check=True)
    return LIB


class CGrammar:
    """hetero_opts.c through ctypes: option value -> meaning, as the plugin parses it."""

    def __init__(self, lib: Path) -> None:
        self.lib = ctypes.CDLL(str(lib))
        self.err = ctypes.create_string_buffer(ERR_MAX)
        self.confs: dict[tuple[tuple[str, tuple[str, ...]], ...], HeteroConf] = {}

    def conf(self, lists: dict[str, tuple[str, ...]]) -> HeteroConf:
        key = tuple(sorted(lists.items()))
        if key not in self.confs:
            conf = HeteroConf()
            args = [f"{k}={','.join(v)}".encode() for k, v in key]
            argv = (ctypes.c_char_p * max(1, len(args)))(*args)
            if self.lib.hetero_conf_parse(ctypes.byref(conf), len(args), argv, self.err, ERR_MAX):
                raise ValueError(f"plugstack lists {args}: {self.err.value.decode()}")
            self.confs[key] = conf
        return self.confs[key]

    def parse(self, option: str, value: bytes,
              lists: dict[str, tuple[str, ...]] | None = None) -> tuple[G.Meaning | None, str]:
        """(the meaning, "") when accepted, else (None, the plugin's message)."""
        v, err, out = ctypes.c_char_p(value), self.err, None
        if option == "accel":
            a = HeteroAccel()
            if not self.lib.hetero_parse_accel(v, ctypes.byref(a), err, ERR_MAX):
                out = {"kind": KINDS[a.kind], "name": a.name.decode(), "count": a.count,
                       "units_milli": a.units_milli, "mem_mib": a.mem_mib}
        elif option == "arch":
            arch = ctypes.c_int(-1)
            if not self.lib.hetero_parse_arch(v, ctypes.byref(arch), err, ERR_MAX):
                out = {"arch": ARCHES[arch.value]}
        elif option in ("energy", "tier"):
            conf, name = self.conf(lists or {}), ctypes.create_string_buffer(POLICY_MAX + 1)
            fn, allowed = ((self.lib.hetero_parse_energy, conf.energy) if option == "energy"
                           else (self.lib.hetero_parse_tier, conf.tiers))
            if not fn(v, ctypes.byref(allowed), name, err, ERR_MAX):
                out = {"name": name.value.decode()}
        elif option == "image":
            img = HeteroImage()
            if not self.lib.hetero_parse_image(v, ctypes.byref(img), err, ERR_MAX):
                out = {"name": img.name.decode(), "tag": img.tag.decode()}
        elif option == "checkpoint":
            path = ctypes.create_string_buffer(VALUE_MAX + 1)
            if not self.lib.hetero_parse_checkpoint(v, path, err, ERR_MAX):
                out = {"path": path.value.decode()}
        elif option == "migratable":
            if not self.lib.hetero_check_migratable(v, err, ERR_MAX):
                out = {}
        else:
            raise ValueError(option)
        return out, "" if out is not None else err.value.decode("ascii", "replace")


@dataclass
class Report:
    executions: int = 0
    seconds: float = 0.0
    accepted: int = 0
    disagreements: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"{self.executions} executions in {self.seconds:.1f} s "
                f"({self.executions / max(self.seconds, 1e-9):.0f}/s), {self.accepted} accepted by both, "
                f"{len(self.disagreements)} disagreements")


def case_line(option: str, value: bytes, meaning: G.Meaning | None) -> str:
    """A case-file line for value (the C side's answer as the expectation)."""
    text = "".join(chr(b) if 0x20 <= b < 0x7f and chr(b) not in '"\\' else
                   {0x5c: "\\\\", 0x22: '\\"'}.get(b, f"\\x{b:02x}") for b in value)
    if meaning is None:
        return f'{option} "{text}" reject'
    return f'{option} "{text}" ok ' + " ".join(f"{k}={v}" for k, v in meaning.items())


def mutate(rng: random.Random, value: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(value)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 8))):
        op = rng.randrange(10)
        at = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(at, len(b) - 1)]
        elif op == 1:
            b[at:at] = bytes([rng.choice(ALPHABET)])
        elif op == 2 and b:
            b[min(at, len(b) - 1)] = rng.choice(b"0123456789.:,=>kmgtbKMGTB-_/aZ")
        elif op == 3:
            b[at:at] = rng.choice(TOKENS)
        elif op == 4 and b:  # a run of one byte, to the limits and past them
            n = rng.choice((2, 3, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257))
            c = b[min(at, len(b) - 1)]
            b[at:at] = bytes([c]) * (n - 1)
        elif op == 5 and b:
            b = b[:at]
        elif op == 6:  # splice with another seed
            other = rng.choice(pool)
            b = b[:at] + other[rng.randrange(len(other) + 1):]
        elif op == 7 and b:
            i = min(at, len(b) - 1)
            b[i:i + 1] = bytes(b[i:i + 1]).swapcase()
        elif op == 8:  # a digit string of a random length
            b[at:at] = str(rng.randrange(10 ** rng.randrange(1, 22))).encode()
        elif op == 9 and b:
            i, j = sorted((rng.randrange(len(b)), rng.randrange(len(b))))
            b[at:at] = b[i:j + 1]
    return bytes(b).replace(b"\0", b"")[:4 * VALUE_MAX]


def inputs(rng: random.Random, seeds: dict[str, list[bytes]]) -> Iterator[tuple[str, bytes]]:
    """Every seed once as it is, then mutants for ever."""
    for option, values in seeds.items():
        for v in values:
            yield option, v
    everything = [v for vs in seeds.values() for v in vs]
    while True:
        option = rng.choice(G.OPTIONS)
        base = rng.choice(seeds[option] if rng.random() < 0.8 else everything)
        yield option, mutate(rng, base, everything)


def run(seconds: float, seed: int = 1, max_execs: int | None = None, lib: Path | None = None,
        bridge: str | None = None) -> Report:
    """Fuzz for `seconds` (or max_execs inputs); bridge: bridge.lua's text (default: shipped)."""
    c, lua = CGrammar(lib or build_lib()), G.LuaGrammar(bridge)
    seeds: dict[str, list[bytes]] = {o: [] for o in G.OPTIONS}
    for case in G.load():
        seeds[case.option].append(case.value)
    rng = random.Random(seed)
    report, seen = Report(), set()
    start = time.monotonic()
    for option, value in inputs(rng, seeds):
        if report.executions % 256 == 0 and time.monotonic() - start > seconds:
            break
        if max_execs is not None and report.executions >= max_execs:
            break
        report.executions += 1
        lists = rng.choice(LISTS)
        allowed = lists.get("energy" if option == "energy" else "tiers")
        got_c, _ = c.parse(option, value, lists)
        got_lua, why = lua.parse(option, value, frozenset(allowed) if allowed else None)
        if got_lua is None and not (why and all(0x20 <= ord(ch) < 0x7f for ch in why)):
            report.disagreements.append(f"# the bridge's reason is not one printable line: {why!r}")
        if got_c != got_lua and (option, value) not in seen:
            seen.add((option, value))
            lists_line = "@lists " + " ".join(f"{k}={','.join(v)}" for k, v in lists.items())
            report.disagreements.append(f"{lists_line}\n{case_line(option, value, got_c)}"
                                        f"    # C; the bridge: {got_lua or why}")
        elif got_c is not None:
            report.accepted += 1
    report.seconds = time.monotonic() - start
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    report = run(args.seconds, seed)
    print(f"grammar fuzz, seed {seed}: {report}")
    for d in report.disagreements[:50]:
        print(d)
    return 1 if report.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
