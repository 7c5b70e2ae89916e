"""Who said what: each credit in the project's text names its source (issue 45).

The paper (arXiv 2605.24426) and the authors' release (github.com/yihaohu0118/SEAL) state different things;
a line that credits the paper with a value only the release states, or cites a release file that the release
does not have, misleads a reader who checks. The facts here were read from the release's two branches."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT = [p for folder in ("conf", "docs", "seal", "tests", "experiments") for p in (REPO / folder).rglob("*")
        if p.suffix in (".py", ".yaml", ".md", ".json", ".txt") and p.name != Path(__file__).name] + [REPO / "README.md"]
# the release's run configs: `main` has exp/SEAL.yaml; the five arms are on another branch (docs/reproducing-the-paper.md)
RELEASE_CONFIGS = {"exp/SEAL.yaml", "exp/bfcl_seal_00_vanilla_rl.yaml", "exp/bfcl_seal_01_wo_environment_side_adaptation.yaml",
                   "exp/bfcl_seal_02_wo_diagnosis_guided_reweighting.yaml", "exp/bfcl_seal_03_wo_closed_loop_update.yaml",
                   "exp/bfcl_seal_04_full_seal.yaml"}
# credits that name the wrong source: (what it says, the fact)
WRONG = [
    (r"paper's[^.\n]{0,40}\bEMA\b", "the paper describes no EMA of rho: the release's rule"),
    # in prose ("the paper's KL") and in a name ("test_..._papers_kl_...")
    (r"paper(?:'s|s)[ _](?:low-variance KL|low_var_kl|KL|kl)(?![ _]coef)(?![a-z])",
     "the paper gives the KL coefficient only; the estimator (low_var_kl) and its aggregation are the release's"),
    (r"arms_differ_only_where_the_paper_says",
     "the arms' rendering, observation note and 20 steps per trajectory are the release's configs; Table 3 names only "
     "what each arm turns off"),
    (r"paper (names|states|gives|uses) (this|the|an?) (KL )?estimator|paper's (KL )?estimator",
     "the paper gives the KL coefficient only; the estimator (low_var_kl) is the release's"),
    (r"Table 4[^.\n]{0,60}(low-variance|low_var_kl|clip 0\.2|grad clip|6 epochs|steps per turn|per-turn)",
     "Table 4 states none of these: the release's config does (or BFCL, for steps per turn)"),
    (r"qwen_xml`? \(the paper's", "qwen_xml is what the release's code runs; Table 4 prints the tool format llama3_json"),
    (r"val_subset_of_test_used_by_release|release validated on a subset", "the release validates on all 400 test entries"),
    (r"release uses the llama3_json", "the release's BFCL environment prompts and parses every model as bfcl_qwen_fc / xml_json"),
    (r"release uses them for different|different sides of training, as in the (authors' )?release",
     "the release labels turns with Table 6's outcomes only and chooses both the weights and its guidelines from them "
     "(bfcl_env.py, _DEFAULT_GUIDELINES keyed by outcome tags); the cause layer driving the interface is this project's"),
    (r"earlier version of the authors|earlier per-category random split of the authors|authors' older per-category",
     "the per-category split is the release's current data/bfcl_400_split.json (both branches), unused by its arms"),
    (r"(?<!budget=)paper's 66 rounds", "the paper gives no round count: 66 is budget=paper's (6 epochs of 11), the release trains 72"),
    (r"(sentences|texts)( shown| the learner reads)? (are|is) (the paper's|Appendix D|quoted from the paper)",
     "the guideline sentences the learner reads are this project's paraphrase of Appendix D.4 (seal.interface.render)"),
]


def _lines():
    for path in TEXT:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            yield f"{path.relative_to(REPO)}:{number}", line


@pytest.mark.parametrize("pattern, fact", WRONG, ids=[w[0][:30] for w in WRONG])
def test_no_line_credits_the_wrong_source(pattern, fact):
    assert [where for where, line in _lines() if re.search(pattern, line)] == [], fact


# values only the release states (the paper: rho fixed in Section 3.4, the KL coefficient alone, no epochs or
# gradient clipping in Table 4), and the words that credit the paper
RELEASE_VALUES = re.compile(r"\bEMA\b|ema_beta|low_var_kl|low-variance KL|grad(ient)? clip|max_grad_norm|total_epochs"
                            r"|\b6 epochs|\bclip(?: ratio)? 0\.2\b|\bepsilon: 0\.2\b")
PAPER_CREDIT = re.compile(r"(?<!budget=)\bpaper\b|Table 4|Section 3\.4")


def test_a_line_that_names_a_release_only_value_beside_the_paper_names_the_release_too():
    """Not only the wrong phrasings above: any line that names one of the release's own values and the paper (not
    budget=paper) says "release" on it or on a line next to it, as in "the release's low_var_kl at the paper's
    coefficient"."""
    lines = {}
    for where, line in _lines():
        path, number = where.rsplit(":", 1)
        lines.setdefault(path, []).append(line)
    unsaid = [f"{path}:{i + 1}" for path, text in lines.items() for i, line in enumerate(text)
              if RELEASE_VALUES.search(line) and PAPER_CREDIT.search(line)
              and "release" not in " ".join(text[max(i - 1, 0):i + 2])]
    assert unsaid == []
    # the check reads a credit as a reader does
    assert RELEASE_VALUES.search("the paper's KL: low_var_kl") and PAPER_CREDIT.search("the paper's KL: low_var_kl")
    assert not PAPER_CREDIT.search("budget=paper's 6 epochs")
    assert RELEASE_VALUES.search("clip ratio 0.2 (Table 4)") and not RELEASE_VALUES.search("clip ratio 0.25")


# budget and trainer values that only the release's arm 04 states (Table 4 has none of them)
RELEASE_ONLY = ("epochs", "epsilon", "max_grad_norm")


def test_no_test_named_for_table_4_alone_checks_the_releases_values():
    """A test's name is a credit too: one named for Table 4 that asserts a release-only value must name both."""
    import ast

    wrong = []
    for path in (REPO / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and "table_4" in node.name and "release" not in node.name:
                used = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                wrong += [f"{path.name}::{node.name} checks {key}" for key in RELEASE_ONLY if key in used]
    assert wrong == []


def test_every_release_config_cited_is_one_the_release_has():
    cited = {m for _, line in _lines() for m in re.findall(r"exp/[\w./-]+?\.yaml", line)}
    assert cited and cited <= RELEASE_CONFIGS, cited - RELEASE_CONFIGS


def test_the_releases_branches_and_commits_are_named_in_one_place():
    for name in ("seal-release-cleanup", "450bad7", "a0d22db"):
        assert {where.split(":")[0] for where, line in _lines() if name in line} == {"docs/reproducing-the-paper.md"}, name


def test_whose_words_the_interface_texts_are():
    import seal.interface.render as render
    from seal.interface.render import GUIDELINE_TEXT, RELEASE_SCHEMA_NOTE, SCHEMA_NOTE

    # the release's observation_lite instruction (bfcl_env.py, its default), typed from the release
    release_note = ("Observation note: parameters marked [required] must be provided exactly when calling "
                    "a tool; do not invent tools outside the current schema.")
    assert RELEASE_SCHEMA_NOTE == release_note
    # the project style's note is the same two clauses without the release's label and "when calling a tool": the
    # release's words shortened, not this project's own
    clauses = release_note.removeprefix("Observation note: ").replace(" when calling a tool", "").split("; ")
    assert [c.rstrip(".").lower() for c in SCHEMA_NOTE.split(". ")] == [c.rstrip(".").lower() for c in clauses]
    # the release words its guidelines "[Cautious-call] If no available function clearly matches the user's request,
    # respond in plain text rather than fabricating a tool call." and so on: not what the learner reads here
    release_openings = ("[Cautious-call]", "[Active-respond]", "[State-aware]", "[Scope]", "[Format]")
    assert not [t for t in GUIDELINE_TEXT.values() if t.startswith(release_openings) or "fabricating a tool call" in t]
    # and the module says so, each text under its source
    # the paper's Appendix D prints the release's texts word for word (typed from the paper): D.2's instruction is
    # the release's note, D.4's first guideline the release's; so a text quoted from one is quoted from both
    appendix_d2 = ("Observation note: parameters marked [required] must be provided exactly when calling a tool; do not "
                   "invent tools outside the current schema.")
    appendix_d4 = ("[Cautious-call] If no available function clearly matches the user's request, respond in plain text "
                   "rather than fabricating a tool call.")
    assert appendix_d2 == release_note and appendix_d4.startswith(release_openings[0])
    credits = render.__doc__.split("Whose words the learner reads")[1]
    assert all(f"{part} its" in " ".join(credits.split()) for part in ("D.2", "D.3", "D.4"))
    quoted, shortened, paraphrase, project = (" ".join(credits.split("\n- ")[i].split()) for i in (1, 2, 3, 4))
    assert quoted.startswith("the release's and Appendix D.2's, quoted: RELEASE_SCHEMA_NOTE")
    assert shortened.startswith("the same, shortened: SCHEMA_NOTE")
    assert paraphrase.startswith("this project's paraphrase of the paper's") and "quoted from neither" in paraphrase
    assert all(w in paraphrase for w in ("PLAIN_TEXT", "were missing"))
    assert project.startswith("this project's words: GUIDELINE_TEXT") and "release and Appendix D.4" in project
    assert "release and Appendix D.3" in paraphrase
    # the release's execution-error hints (bfcl_env.py, _enrich_tool_response_text), typed from the release: the
    # hints here open otherwise, so they are no quotation of it
    from seal.interface.render import PLAIN_TEXT

    release_hints = ("Required argument(s) {args} for `{tool}` were missing.", "`{tool}` does not accept argument `{arg}`.",
                     "`{tool}` rejected an argument type.", "If no listed tool matches the user's request, reply in plain text.")
    ours = [PLAIN_TEXT, *_execution_hints()]
    assert len(ours) == 4 and "Required argument(s) dir_name of mkdir were missing." in ours[1]
    for hint in release_hints:
        shown = hint.format(args="dir_name", tool="mkdir", arg="mode")
        assert not [text for text in ours if shown in text], shown


def _execution_hints():
    """The hints for a missing, an unknown and a mistyped argument of one BFCL tool, as the learner reads them."""
    from seal.env import load_benchmark
    from seal.env.executor import Backends, execute
    from seal.interface.render import error_hint

    entry = load_benchmark()["multi_turn_base_0"]
    visible = entry.visible_function_names(0)
    hints = []
    for text in ("mkdir()", "mkdir(dir_name='a', mode='x')", "mkdir(dir_name=5)"):
        record = execute(Backends(entry.involved_classes, entry.initial_config, entry.long_context), text)
        hints.append(error_hint(record, visible, "<tool_call>...</tool_call>"))
    return hints
