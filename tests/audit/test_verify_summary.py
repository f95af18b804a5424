"""The summary line of `capreg audit verify`, in words: what was checked and what that proves."""

from __future__ import annotations

from registry.audit.verify_summary import intact_summary


def test_an_empty_log_says_there_is_nothing_to_check():
    line = intact_summary(0, 0, [0, 0])
    assert line.startswith("audit chain intact") and "empty" in line and "0, 0" not in line


def test_without_a_covering_checkpoint_it_says_what_is_not_proven():
    line = intact_summary(12, 12, [0])
    assert line.startswith("audit chain intact: 12 events (seq 1 to 12) re-hashed")
    assert "no signed checkpoint covers an event yet" in line and "--checkpoint" in line
    assert "\n" not in line


def test_a_covering_checkpoint_says_up_to_where_nothing_was_rewritten():
    line = intact_summary(12, 12, [12, 12])
    assert "the signed checkpoint for seq 12 verifies" in line
    assert "nothing up to seq 12 was rewritten or cut off" in line and "later" not in line
    later = intact_summary(15, 15, [9, 12, 0])
    assert "checkpoints for seq 9, 12 verify" in later and "nothing up to seq 12" in later
    assert "3 later events are covered by the chain only" in later
    assert "1 later event is covered" in intact_summary(13, 13, [12])
