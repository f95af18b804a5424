"""The summary line of `capreg audit verify`, in words: what was checked and what that proves."""

from __future__ import annotations

from registry.audit.verify_summary import intact_summary


def test_an_empty_log_says_there_is_nothing_to_verify_and_keeps_its_caveat():
    line = intact_summary(0, 0, [0, 0])
    assert line.startswith("no events yet: nothing to verify") and "intact" not in line and "0, 0" not in line
    assert "caveat: " in line and "--checkpoint FILE" in line and "\n" not in line


def test_tenant_chains_count_up_to_the_newest_event_not_the_empty_single_chain():
    line = intact_summary(3, 0, [0], chains=1, last_seq=3)
    assert line.startswith("audit chain intact: 3 events (seq 1 to 3) re-hashed") and "up to seq 0" not in line
    assert "(1 tenant chain checked the same way, each from the single chain's head, which is empty)" in line
    covered = intact_summary(5, 0, [3], chains=2, last_seq=5)
    assert (
        "nothing up to seq 3 was rewritten" in covered
        and "events at seq 4 to 5 are covered by the chain only" in covered
    )


def test_every_intact_line_ends_with_its_caveat():
    for line in (
        intact_summary(12, 12, [0]),
        intact_summary(12, 12, [12]),
        intact_summary(12, 12, [12], external=1),
        intact_summary(3, 0, [3], chains=1, last_seq=3),
    ):
        assert line.count("; caveat: ") == 1 and line.rsplit("; ", 1)[1].startswith("caveat: "), line
    assert "--checkpoint FILE" in intact_summary(12, 12, [12])
    assert "kept outside the database are covered by the chain only" in intact_summary(12, 12, [12], external=1)


def test_without_a_covering_checkpoint_it_says_what_is_not_proven():
    line = intact_summary(12, 12, [0])
    assert line.startswith("audit chain intact: 12 events (seq 1 to 12) re-hashed")
    assert "no signed checkpoint covers an event yet" in line and "--checkpoint" in line
    assert "\n" not in line


def test_a_covering_checkpoint_says_up_to_where_nothing_was_rewritten():
    line = intact_summary(12, 12, [12, 12])
    assert "the signed checkpoint for seq 12 verifies" in line
    assert "nothing up to seq 12 was rewritten or cut off" in line and "chain only" not in line
    later = intact_summary(15, 15, [9, 12, 0])
    assert "checkpoints for seq 9, 12 verify" in later and "nothing up to seq 12" in later
    assert "events at seq 13 to 15 are covered by the chain only" in later
    assert "events at seq 13 are covered" in intact_summary(13, 13, [12])


def test_seq_numbers_left_by_rolled_back_writes_are_named_not_counted_as_events():
    line = intact_summary(21704, 0, [820], chains=163, last_seq=21705)
    assert line.startswith("audit chain intact: 21704 events (seq 1 to 21705, 1 seq number left unused by rolled-back")
    assert "events at seq 821 to 21705 are covered by the chain only" in line
    assert "(seq 1 to 9, 2 seq numbers left unused" in intact_summary(7, 0, [0], chains=1, last_seq=9)
