"""seal.policy.progress: what a long step says while it runs, and the play's turns as they end."""

import logging

from seal.policy.progress import Progress, duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_durations_read_as_a_person_reads_them():
    assert [duration(s) for s in (0, 44.6, 61, 3599, 3600, 7500)] == ["0 s", "45 s", "1 min 01 s", "59 min 59 s",
                                                                      "1 h 00 min", "2 h 05 min"]


def test_a_step_logs_what_is_done_its_tokens_and_the_time_left_every_minute(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="seal.progress")
    progress = Progress("eval before · release", 16, unit="turn", episodes=4, bar=False, every=60, clock=clock)
    assert progress.line() == "eval before · release: turn 0 of 16, 0 of 4 episodes done; 0 s, no turn done yet"
    clock.now += 30
    progress.advance(4, tokens=600)
    assert caplog.records == []  # not a minute yet
    clock.now += 30
    progress.advance(0, episodes=1, tokens=600)
    # by hand: 4 of 16 turns in 60 s -> 12 left at 15 s each = 180 s; 1,200 tokens in 60 s = 20/s
    (record,) = caplog.records
    assert record.getMessage() == ("eval before · release: turn 4 of 16, 1 of 4 episodes done, 1,200 tokens written "
                                   "(20/s); 1 min 00 s, about 3 min 00 s left")
    clock.now += 60  # the last units a minute later: the step's end is one line, close()'s, not two
    progress.advance(12, episodes=3)
    progress.close()
    assert [r.getMessage() for r in caplog.records[1:]] == [
        "eval before · release: turn 16 of 16, 4 of 4 episodes done, 1,200 tokens written (10/s); 2 min 00 s"]


def test_a_play_whose_turns_grow_as_it_goes_keeps_logging_until_its_last_episode(caplog):
    # tau2: each conversation starts with one turn planned and grows by one as each turn ends, so the turns done
    # equal the turns planned all along; only the last episode ends the step
    clock = Clock()
    caplog.set_level(logging.INFO, logger="seal.progress")
    progress = Progress("ood after · tau2 · retail", 2, unit="turn", episodes=2, bar=False, every=60, clock=clock)
    for minute in range(3):
        clock.now += 60
        progress.advance(2)  # a turn of each conversation ends: every turn planned so far is done ...
        progress.grow(2)  # ... and each goes on with one more
    assert [m.split(": ")[1].split(";")[0] for m in caplog.messages] == [
        "turn 2 of 2, 0 of 2 episodes done", "turn 4 of 4, 0 of 2 episodes done", "turn 6 of 6, 0 of 2 episodes done"]
    clock.now += 60
    progress.advance(2, episodes=2)  # both conversations end: 8 of 8, 2 of 2
    progress.close()
    assert len(caplog.messages) == 4 and caplog.messages[-1] == (
        "ood after · tau2 · retail: turn 8 of 8, 2 of 2 episodes done; 4 min 00 s")


def test_an_evaluation_counts_every_turn_of_its_entries(caplog, bench):
    """The oracle replays the gold calls: the play's last line counts the entries' turns as the data has them."""
    from seal.budget import Budget
    from seal.policy.oracle import OracleBackbone
    from seal.policy.rollout import RolloutEngine
    from tests.test_configs import compose_with

    entries = [bench[i] for i in ("multi_turn_base_0", "multi_turn_miss_func_3", "multi_turn_long_context_7")]
    turns = sum(len(e.turns) for e in entries)  # from the benchmark's own files
    engine = RolloutEngine.for_backbone(OracleBackbone(), OracleBackbone().load(), Budget.from_config(compose_with().budget))
    caplog.set_level(logging.INFO, logger="seal.progress")
    rollouts = engine.play(entries, temperature=0.0, progress="eval test · bfcl")
    tokens = sum(r.num_model_tokens for r in rollouts)
    last = caplog.records[-1].getMessage()
    assert last.startswith(f"eval test · bfcl: turn {turns} of {turns}, 3 of 3 episodes done, {tokens:,} tokens written")
