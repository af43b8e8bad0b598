"""One fake Slurm for unit tests: it patches the project's one runner (`Runner.run`) and
answers each command by its argv[0], recording every call with the runner's extra env.

    slurm = FakeSlurm(monkeypatch).on("sacct", sacct_by_day({"2026-01-01": text}))
    ...
    assert slurm.argvs("sacct")[0][:2] == ["sacct", "-a"]

A command it has no answer for fails as a missing program does with the real runner.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pytest

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.runner import Runner, SlurmCommandError

# argv and the runner's extra environment → stdout (or raise SlurmCommandError).
Answer = Callable[[list[str], dict[str, str]], str]


@dataclass(frozen=True)
class Call:
    argv: list[str]
    env: dict[str, str]  # the runner's extra_env (SLURM_TIME_FORMAT, ...)
    slurm_conf: str | None


class FakeSlurm:
    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.answers: dict[str, Answer] = {}
        self.calls: list[Call] = []
        fake = self

        def run(runner: Runner, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
            return fake.answer(runner, list(argv), check)

        monkeypatch.setattr(Runner, "run", run)

    def on(self, command: str, answer: str | Answer) -> FakeSlurm:
        """Answer `command` with fixed text, or with what `answer(argv, env)` returns."""
        if callable(answer):
            self.answers[command] = answer
        else:
            text = answer
            self.answers[command] = lambda argv, env: text
        return self

    def fail(self, command: str, stderr: str, returncode: int = 1) -> FakeSlurm:
        """`command` exits `returncode` with `stderr`."""
        def answer(argv: list[str], env: dict[str, str]) -> str:
            raise SlurmCommandError(argv, returncode, stderr)
        return self.on(command, answer)

    def answer(self, runner: Runner, argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        self.calls.append(Call(argv, dict(runner.extra_env), runner.slurm_conf))
        if argv[0] not in self.answers:
            raise RuntimeFailure(f"{argv[0]}: not installed (the fake Slurm has no answer for it)")
        try:
            return subprocess.CompletedProcess(argv, 0, self.answers[argv[0]](argv, dict(runner.extra_env)), "")
        except SlurmCommandError as e:
            if check:
                raise
            return subprocess.CompletedProcess(argv, e.returncode, "", e.stderr)

    def argvs(self, command: str) -> list[list[str]]:
        return [c.argv for c in self.calls if c.argv[0] == command]


def sacct_by_day(days: Mapping[str, str]) -> Answer:
    """sacct's answer for each day its -S names (YYYY-MM-DD); nothing on other days."""
    def answer(argv: list[str], env: dict[str, str]) -> str:
        return days.get(argv[argv.index("-S") + 1][:10], "")
    return answer


def sacct_names(answer: Answer, names: Mapping[str, str] | None = None) -> Answer:
    """`answer` serves sacct's rows (slurm.sacct.FIELDS order); the names query of the same
    window (`-o JobIDRaw,JobName,JobIDRaw`) gets `ID<US>name<US>ID` for each allocation line
    of those rows, the name from `names` or `job<ID>`."""
    from slurm_hetero.slurm.sacct import DELIM, NAME_FIELDS

    def answer_with_names(argv: list[str], env: dict[str, str]) -> str:
        if argv[argv.index("-o") + 1] != ",".join(NAME_FIELDS):
            return answer(argv, env)
        rows = answer([*argv[:argv.index("-o")], "-o", "rows"], env)
        ids = [ln.split(DELIM, 1)[0] for ln in rows.splitlines() if ln]
        return "".join(f"{i}{DELIM}{(names or {}).get(i, f'job{i}')}{DELIM}{i}\n" for i in ids if "." not in i)
    return answer_with_names
