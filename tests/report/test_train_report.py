"""report.md's split section and curves.png's layout (seal.report.train_report)."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

from seal.env.splits import scenario_disjoint, seal_release  # noqa: E402
from seal.report.train_report import curves_figure, split_section  # noqa: E402


def history(rounds):
    return [SimpleNamespace(round=r, metrics={
        "train/reward_mean": 0.1 * r, "train/turn_pass_rate": 0.2 * r, "diag/outcome/pass": 0.5,
        "diag/outcome/state_mismatch": 0.5, "diag/outcome/num_turns": 10, "diag/cause/none": 1.0,
        "reweight/rho/pass": 1.0, "reweight/rho/state_mismatch": 1.0 + 0.1 * r, "reweight/weight_mean": 1.1})
        for r in range(rounds)]


def test_the_curves_have_whole_round_ticks_a_title_and_legends_clear_of_the_panels():
    import matplotlib.pyplot as plt

    fig = curves_figure(history(3), "seal | tiny-random | seed 0")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        assert fig.get_suptitle() == "seal | tiny-random | seed 0"
        for ax in fig.axes:
            low, high = ax.get_xlim()
            shown = [t for t in ax.get_xticks() if low <= t <= high]
            # three rounds: 0, 1, 2 (matplotlib's own choice would be 0.0, 0.25, ..., 2.0)
            assert shown == [0, 1, 2], (ax.get_title(), shown)
            legend = ax.get_legend()
            assert legend is not None
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), ax.get_title()
    finally:
        plt.close(fig)


def test_the_report_says_why_the_authors_split_is_not_leak_free():
    lines = split_section(seal_release().leakage())
    assert lines[:4] == ["", "## Split", "", "Parts (entries): train 400, test 400."]
    text = lines[-1]
    assert text.startswith("`leakage.json`: `leak_free: false`. Train and test split the duplicate scenarios {40, 43}, "
                           "one task under several numbers (the same first turn): train has 43; test has 40. Train and "
                           "test split the duplicate scenarios {66, 70, 74}, one task under several numbers (the same "
                           "initial configuration): train has 66; test has 70, 74.")
    assert text.endswith("This is the authors' split (split=seal_release), kept as they released it so that results "
                         "compare with the paper's.")


def test_a_leak_free_split_says_so_without_a_note():
    leakage = scenario_disjoint(val_scenarios=10).leakage()
    assert "note" not in leakage
    assert split_section(leakage)[-1] == ("`leakage.json`: `leak_free: true`, no scenario and no duplicate-scenario "
                                          "group on two sides.")
