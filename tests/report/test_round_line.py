"""The console's one line per round (seal.report.train_report.round_line)."""

from types import SimpleNamespace

from seal.report.train_report import round_line


def test_a_round_line_shows_the_numbers_a_user_watches():
    record = SimpleNamespace(
        round=4, interface_diff="schema: off -> on\nversion: 1 -> 2",
        metrics={"train/reward_mean": 0.25, "train/turn_pass_rate": 0.5, "time/generation": 10.0,
                 "time/optimisation": 2.5, "train/loss": 0.1},
        labels={"outcome/pass": 3, "outcome/state_mismatch": 6, "outcome/empty_turn": 1, "cause/wrong_value": 6},
    )
    # top outcome by hand: state_mismatch 6 of 10 outcome turns = 60%; time 10.0 + 2.5 s
    assert round_line(record, planned=10) == (
        "[5/10] round 4 | reward 0.250 | turn pass rate 0.500 | top outcome state_mismatch 60% "
        "| interface schema: off -> on; version: 1 -> 2 | 12.5 s")
    record.interface_diff = ""
    assert "| interface unchanged |" in round_line(record)
    assert round_line(record).startswith("[5/?] round 4")
