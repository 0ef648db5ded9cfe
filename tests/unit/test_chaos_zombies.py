"""A zombie's state machine: stopped until reclaimed, woken, then fenced or not, from what the
queue database shows; a zombie nobody reclaimed is not counted, it is tried again."""

from __future__ import annotations

from chaos_project.chaos.zombies import Phase, Zombie

LIMIT = 10.0


def zombie() -> Zombie:
    return Zombie(
        owner="chaos-w1-g2", slot=1, held={17: 1, 18: 3}, attempts={17: 1, 18: 3}, stopped_at=100.0
    )


def rows(epochs: dict[int, int]) -> dict[int, tuple[int, int]]:
    """The (epoch, attempts) the queue shows: a claim that raised the epoch raised attempts."""
    return {task: (epoch, epoch) for task, epoch in epochs.items()}


def test_stays_stopped_while_nobody_claimed_its_tasks() -> None:
    z = zombie()
    assert not z.observe_epochs(rows({17: 1, 18: 3}), 101.0, give_up=LIMIT)
    assert z.phase is Phase.STOPPED and not z.done


def test_is_woken_once_another_worker_claimed_one_of_its_tasks() -> None:
    z = zombie()
    assert z.observe_epochs(rows({17: 1, 18: 4}), 102.5, give_up=LIMIT)
    assert z.phase is Phase.WOKEN
    assert z.reclaimed == {18: 4}
    assert z.woken_at == 102.5


def test_the_recorded_refusal_of_its_stale_write_makes_it_fenced() -> None:
    z = zombie()
    z.observe_epochs(rows({17: 1, 18: 4}), 102.0, give_up=LIMIT)
    z.observe_fenced(set(), 102.1, give_up=LIMIT)
    assert z.phase is Phase.WOKEN  # not yet: the write may still be on its way
    z.observe_fenced({(18, 3)}, 102.3, give_up=LIMIT)
    assert z.phase is Phase.FENCED and z.done
    assert "task 18" in z.note


def test_a_refusal_at_another_epoch_or_task_does_not_count() -> None:
    z = zombie()
    z.observe_epochs(rows({17: 1, 18: 4}), 102.0, give_up=LIMIT)
    z.observe_fenced({(18, 4), (17, 1)}, 103.0, give_up=LIMIT)  # 17 was never reclaimed
    assert z.phase is Phase.WOKEN


def test_no_refusal_within_the_bound_after_waking_is_unfenced() -> None:
    z = zombie()
    z.observe_epochs(rows({17: 1, 18: 4}), 102.0, give_up=LIMIT)
    z.observe_fenced(set(), 102.0 + LIMIT, give_up=LIMIT)
    assert z.phase is Phase.UNFENCED
    assert "no refused write" in z.note


def test_nobody_reclaiming_within_the_bound_is_not_bitten_and_it_is_continued() -> None:
    z = zombie()
    assert z.observe_epochs(rows({17: 1, 18: 3}), 100.0 + LIMIT, give_up=LIMIT)
    assert z.phase is Phase.NOT_BITTEN and z.done
    assert "nobody claimed" in z.note


def test_a_process_lost_while_stopped_did_not_bite_and_while_woken_is_unfenced() -> None:
    stopped, woken = zombie(), zombie()
    stopped.lost(101.0, "gone")
    woken.observe_epochs(rows({18: 4}), 101.0, give_up=LIMIT)
    woken.lost(102.0, "gone")
    assert stopped.phase is Phase.NOT_BITTEN
    assert woken.phase is Phase.UNFENCED


def test_a_verdict_is_final() -> None:
    z = zombie()
    z.observe_epochs(rows({18: 4}), 101.0, give_up=LIMIT)
    z.observe_fenced({(18, 3)}, 101.5, give_up=LIMIT)
    z.observe_fenced(set(), 200.0, give_up=LIMIT)
    z.lost(201.0, "gone")
    assert z.phase is Phase.FENCED
    assert z.record()["outcome"] == "fenced"


def test_every_reclaimed_task_needs_its_refused_write_not_any_one() -> None:
    z = zombie()
    z.observe_epochs(rows({17: 2, 18: 4}), 102.0, give_up=LIMIT)
    assert z.reclaimed == {17: 2, 18: 4}
    z.observe_fenced({(18, 3)}, 102.5, give_up=LIMIT)
    assert z.phase is Phase.WOKEN  # 17's write is still missing
    z.observe_fenced({(18, 3)}, 102.0 + LIMIT, give_up=LIMIT)
    assert z.phase is Phase.UNFENCED
    assert z.note.startswith("task 17 claimed again") and "refused: 18" in z.note
    assert z.record()["fenced"] == [18]


def test_a_claim_that_kept_the_epoch_is_a_reclaim_and_is_named() -> None:
    z = zombie()
    assert z.observe_epochs({17: (1, 1), 18: (3, 4)}, 102.0, give_up=LIMIT)
    assert z.reclaimed == {18: 3}
    z.observe_fenced(set(), 102.0 + LIMIT, give_up=LIMIT)
    assert z.phase is Phase.UNFENCED
    assert "task 18 without a new epoch" in z.note


def test_a_paused_zombie_waits_until_every_task_it_holds_was_claimed() -> None:
    z = zombie()
    z.paused = True
    assert not z.observe_epochs(rows({17: 1, 18: 4}), 102.0, give_up=LIMIT)
    assert z.phase is Phase.STOPPED  # its ack may be for 17, whose lease is still its own
    assert z.observe_epochs(rows({17: 2, 18: 4}), 102.5, give_up=LIMIT)
    assert z.reclaimed == {17: 2, 18: 4}


def test_a_paused_zombie_wakes_a_while_after_its_first_task_was_claimed() -> None:
    z = zombie()
    z.paused = True
    assert not z.observe_epochs(rows({17: 1, 18: 4}), 102.0, give_up=LIMIT)
    assert z.observe_epochs(rows({17: 1, 18: 4}), 104.0, give_up=LIMIT)
    assert z.reclaimed == {18: 4}


def test_a_task_finished_without_it_counts_as_taken_and_needs_its_refused_write() -> None:
    """A claim that met task 18 with its attempts used up (or a cancel) buried it at the epoch
    the zombie holds: no attempt was added, yet the zombie's late write now meets a finished
    task, and the state guard must refuse it."""
    z = zombie()
    assert not z.observe_epochs(
        {17: (1, 1, "pending"), 18: (3, 3, "pending")}, 101.0, give_up=LIMIT
    )
    assert z.observe_epochs({17: (1, 1, "pending"), 18: (3, 3, "dead")}, 101.5, give_up=LIMIT)
    assert z.reclaimed == {18: 3}
    z.observe_fenced(set(), 101.6 + LIMIT, give_up=LIMIT)
    assert z.phase is Phase.UNFENCED
    assert "task 18 claimed again (task 18 without a new epoch)" in z.note


def test_a_refused_write_to_a_task_a_claim_buried_makes_it_fenced() -> None:
    z = zombie()
    z.observe_epochs({17: (1, 1, "dead"), 18: (4, 4, "pending")}, 101.0, give_up=LIMIT)
    z.observe_fenced({(17, 1), (18, 3)}, 101.2, give_up=LIMIT)
    assert z.phase is Phase.FENCED


def test_a_paused_zombie_wakes_once_the_task_its_write_is_for_was_taken() -> None:
    """Not after the others: the new holder of that task may finish it meanwhile, and then the
    late write is refused by the task's state whatever the epoch guard does."""
    z = zombie()
    z.paused, z.paused_tasks = True, (18,)
    assert not z.observe_epochs(rows({17: 2, 18: 3}), 101.0, give_up=LIMIT)
    assert z.observe_epochs(rows({17: 2, 18: 4}), 101.1, give_up=LIMIT)
    assert z.phase is Phase.WOKEN


def test_an_ack_paused_for_a_task_a_claim_buried_meets_no_lease_and_is_paused_again() -> None:
    """A one-shot task (max_attempts 1) whose zombie paused before its ack is buried by the next
    claim at the zombie's own epoch: the late ack meets the state guard, not the epoch guard,
    and a store whose ack ignores the epoch would pass the run (1 quick run in 15 did)."""
    from chaos_project.chaos.loop import write_meets_no_lease

    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "after_effect_before_ack", (17,)
    assert write_meets_no_lease(z, {17: (1, 1, "dead", ""), 18: (4, 4, "pending", "")}) == [17]
    assert write_meets_no_lease(z, {17: (2, 2, "pending", None)}) == []  # a new lease: kept
    z.pause_point = "after_error_before_fail"  # there, a finished task is what is wanted
    assert write_meets_no_lease(z, {17: (1, 1, "dead", "")}) == []
    z.paused, z.pause_point = False, ""  # a SIGSTOPped zombie has no paused write
    assert write_meets_no_lease(z, {17: (1, 1, "dead", "")}) == []


def test_the_paused_tasks_are_read_from_the_workers_last_failpoint_line(tmp_path) -> None:
    from chaos_project.chaos.loop import paused_tasks

    log = tmp_path / "w.log"
    log.write_text(
        '{"event": "claimed", "task": 3}\nnot json\n'
        '{"event": "failpoint_fired", "point": "after_error_before_fail", "task": 9}\n'
    )
    assert paused_tasks(log) == (9,)
    with log.open("a") as out:
        out.write('{"event": "failpoint_fired", "point": "before_flush", "tasks": [4, 5]}\n')
    assert paused_tasks(log) == (4, 5)
    assert paused_tasks(tmp_path / "missing.log") == ()


def test_a_zombie_paused_at_a_flush_wakes_once_every_task_of_the_flush_was_taken() -> None:
    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "before_flush", (17, 18)
    z.held[19] = 1
    assert not z.observe_epochs(rows({17: 1, 18: 4, 19: 1}), 101.0, give_up=LIMIT)
    assert z.observe_epochs(rows({17: 2, 18: 4, 19: 1}), 101.1, give_up=LIMIT)
    assert set(z.reclaimed) == {17, 18}  # 19 is not in the flush, and was not taken


def test_a_zombie_paused_at_a_heartbeat_needs_the_heartbeat_itself_refused() -> None:
    """With the heartbeat's guard gone, the heartbeat is answered "held" and the handler's ack
    is refused later: that ack's record must not pass for the heartbeat's."""
    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "before_heartbeat", (18,)
    assert z.observe_epochs(rows({17: 1, 18: 4}), 101.0, give_up=LIMIT)
    z.observe_fenced({(18, 3)}, 101.2, give_up=LIMIT, ops={(18, 3): {"ack"}})
    assert z.phase is Phase.WOKEN
    z.observe_fenced({(18, 3)}, 101.0 + LIMIT, give_up=LIMIT, ops={(18, 3): {"ack"}})
    assert z.phase is Phase.UNFENCED
    again = zombie()
    again.paused, again.pause_point, again.paused_tasks = True, "before_heartbeat", (18,)
    again.observe_epochs(rows({17: 1, 18: 4}), 101.0, give_up=LIMIT)
    again.observe_fenced({(18, 3)}, 101.2, give_up=LIMIT, ops={(18, 3): {"beat", "ack"}})
    assert again.phase is Phase.FENCED


def test_a_zombie_paused_at_an_ack_needs_the_ack_refused_not_only_its_heartbeat() -> None:
    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "after_effect_before_ack", (18,)
    assert z.observe_epochs(rows({17: 1, 18: 4}), 101.0, give_up=LIMIT)
    assert not z.write_refused({"beat"})
    assert z.write_refused({"beat", "ack"})
    z.observe_fenced({(18, 3)}, 101.0 + LIMIT, give_up=LIMIT, ops={(18, 3): {"beat"}})
    assert z.phase is Phase.UNFENCED


def test_a_heartbeat_zombie_whose_task_finished_under_its_own_epoch_needs_any_refusal() -> None:
    """A cancel buried the task at the zombie's epoch: its heartbeat is refused unrecorded (no
    other worker holds the task); the decision it then writes is refused and recorded."""
    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "before_heartbeat", (18,)
    assert z.observe_epochs({17: (1, 1, "pending"), 18: (3, 3, "dead")}, 101.0, give_up=LIMIT)
    z.observe_fenced({(18, 3)}, 101.2, give_up=LIMIT, ops={(18, 3): {"fail"}})
    assert z.phase is Phase.FENCED


def test_a_zombie_whose_writes_failed_to_reach_the_database_could_not_write() -> None:
    """Woken while the server restarted: its write for task 18 was given up (write_failed), so
    nothing was refused, and nothing tells whether the fence works: not a failure, not a pass."""
    z = zombie()
    z.observe_epochs(rows({17: 1, 18: 4}), 101.0, give_up=LIMIT)
    z.observe_fenced(set(), 101.0 + LIMIT, give_up=LIMIT, unwritten={18})
    assert z.phase is Phase.UNWRITTEN
    assert "failed to reach the database" in z.note
    other = zombie()
    other.observe_epochs(rows({17: 2, 18: 4}), 101.0, give_up=LIMIT)
    other.observe_fenced(set(), 101.0 + LIMIT, give_up=LIMIT, unwritten={18})
    assert other.phase is Phase.UNFENCED  # task 17's write neither refused nor failed


def test_failed_writes_are_read_from_the_workers_log(tmp_path) -> None:
    from chaos_project.chaos.loop import failed_writes

    log = tmp_path / "w.log"
    log.write_text(
        '{"event": "write_failed", "task": 7, "op": "ack"}\nnot json\n'
        '{"event": "acked", "task": 8}\n{"event": "write_failed", "task": 9, "op": "fail"}\n'
    )
    assert failed_writes(log) == {7, 9}
    assert failed_writes(tmp_path / "missing.log") == set()


def test_a_heartbeat_that_failed_to_reach_the_database_lets_the_next_refusal_stand() -> None:
    z = zombie()
    z.paused, z.pause_point, z.paused_tasks = True, "before_heartbeat", (18,)
    assert not z.write_refused({"fail"})
    z.paused_write_failed = True  # heartbeat_failed in its log after the pause
    assert z.write_refused({"fail"})
    assert not z.write_refused(set())


def test_a_failed_heartbeat_is_read_after_the_pause_only(tmp_path) -> None:
    from chaos_project.chaos.loop import heartbeat_failed_after_pause

    log = tmp_path / "w.log"
    log.write_text('{"event": "heartbeat_failed"}\n{"event": "failpoint_fired", "tasks": [1]}\n')
    assert not heartbeat_failed_after_pause(log)
    with log.open("a") as out:
        out.write('{"event": "heartbeat_failed", "error": "OperationalError"}\n')
    assert heartbeat_failed_after_pause(log)


def test_a_task_its_own_late_committing_write_finished_was_not_taken_from_it() -> None:
    """SIGSTOPped while its flush was in flight: the ack committed after the harness read what
    it held. The task is done by its own write at its own epoch: nothing was taken."""
    z = zombie()
    seen = {17: (1, 1, "done", "chaos-w1-g2"), 18: (3, 3, "pending", None)}
    assert not z.observe_epochs(seen, 101.0, give_up=LIMIT)
    assert z.reclaimed == {}
    buried = {17: (1, 1, "dead", ""), 18: (3, 3, "pending", None)}  # a claim's burial
    assert z.observe_epochs(buried, 101.5, give_up=LIMIT)
    assert z.reclaimed == {17: 1}


def test_the_leases_a_worker_knows_are_read_from_its_claimed_lines(tmp_path) -> None:
    """A lease in the database whose claim the worker never saw (the answer lost when the
    primary died) is not one a zombie can write for: only ``claimed`` lines count."""
    from chaos_project.chaos.loop import claimed_leases

    log = tmp_path / "w.log"
    log.write_text(
        '{"event": "claimed", "task": 7, "epoch": 1, "owner": "w"}\nnot json\n'
        '{"event": "claim_failed", "error": "server closed the connection unexpectedly"}\n'
        '{"event": "claimed", "task": 7, "epoch": 3}\n{"event": "acked", "task": 8, "epoch": 1}\n'
        '{"event": "retry", "task": 9, "epoch": 2, "error": "claimed by nobody"}\n'
        '{"event": "claimed", "task": "10", "epoch": 1}\n'
    )
    assert claimed_leases(log) == {(7, 1), (7, 3)}
    assert claimed_leases(tmp_path / "missing.log") == set()


def test_a_paused_workers_tasks_are_those_of_its_last_failpoint_line(tmp_path) -> None:
    from chaos_project.chaos.loop import paused_tasks

    log = tmp_path / "w.log"
    log.write_text(
        '{"event": "failpoint_fired", "point": "after_effect_before_ack", "task": 4}\n'
        '{"event": "acked", "task": 4, "note": "not a \\"failpoint_fired\\" line"}\n'
        "not json\n"
        '{"event": "failpoint_fired", "point": "before_flush", "tasks": [5, 6, "7"]}\n'
    )
    assert paused_tasks(log) == (5, 6)
    log.write_text('{"event": "failpoint_fired", "point": "after_effect_before_ack", "task": 4}\n')
    assert paused_tasks(log) == (4,)
    assert paused_tasks(tmp_path / "missing.log") == ()
