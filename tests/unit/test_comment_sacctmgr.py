r"""Our admin-comment record written through sacctmgr, which on Slurm 22.05 lower-cases the
whole value and stores every `"` as a backquote (seen here: `{"a":"/tmp/AbC"}` came back as
{`a`:`/tmp/abc`}). `sacctmgr_store` below is that transformation; the integration tests
(test_migrate, test_energy) read what the real sacctmgr stored."""

from __future__ import annotations

import json

import pytest

from slurm_hetero.slurm.comment import (
    ForeignTextChanged,
    merge_comment,
    parse_comment,
    sacctmgr_proof,
    sits_on_a_line,
)


def sacctmgr_store(value: str) -> str:
    return value.lower().replace('"', "`")


RECORD = {"hetero": 1, "checkpoint": "/tmp/sh-QDnLfj/Ck`pt", "image": "NGC/PyTorch:24.01", "q": 'a"b',
          "pool": "a100-80gb@x86_64"}


def as_the_bridge_writes(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":")).replace("`", "\\u0060")  # bridge.lua's json_string


def test_a_record_written_through_sacctmgr_reads_back_the_same() -> None:
    assert parse_comment(as_the_bridge_writes(RECORD)) == RECORD
    new = merge_comment(as_the_bridge_writes(RECORD), {"node_energy": {"GPU-01": {"energy_j": 5}}},
                        via_sacctmgr=True)
    assert new == new.lower()  # nothing left for sacctmgr to change but the quotes
    back = parse_comment(sacctmgr_store(new))
    assert back == {**RECORD, "node_energy": {"GPU-01": {"energy_j": 5}}}
    # Without the escapes (how it was written before): the path and the image are corrupted.
    assert parse_comment(sacctmgr_store(as_the_bridge_writes(RECORD)))["image"] == "ngc/pytorch:24.01"


def test_foreign_text_sacctmgr_would_change_is_never_written() -> None:
    jobstats = "JS1:H4sIAAAA"  # base64: upper-case letters
    with pytest.raises(ForeignTextChanged, match="upper-case"):
        merge_comment(f'{jobstats} {{"hetero":1}}', {"node_energy": {}}, via_sacctmgr=True)
    with pytest.raises(ForeignTextChanged, match="double quote"):
        merge_comment('say "hi" {"hetero":1}', {"node_energy": {}}, via_sacctmgr=True)
    # lower-case foreign text is kept byte for byte, ours after it
    assert merge_comment('js1:abc {"hetero":1}', {"x": 1}, via_sacctmgr=True) == 'js1:abc {"hetero":1,"x":1}'
    # through scontrol (the job still in slurmctld) case is kept: no escapes, no refusal
    assert merge_comment(f'{jobstats} {{"hetero":1}}', {"x": "Y"}) == f'{jobstats} {{"hetero":1,"x":"Y"}}'


def test_escapes_stay_on_sacctmgrs_stdin_lines_other_backslashes_do_not() -> None:
    assert sacctmgr_proof('{"p":"/A"}') == '{"p":"/\\u0041"}'
    assert sits_on_a_line(sacctmgr_proof('{"hetero":1,"p":"/A/b"}'))
    assert not sits_on_a_line('{"hetero":1,"q":"a\\"b"}')  # an escaped quote: its own argv
    assert not sits_on_a_line('{"hetero":1,"q":"a\\\\b"}')  # an escaped backslash
    assert not sits_on_a_line('{"hetero":1,"q":"\\u00AB"}')  # upper-case hex is not ours
