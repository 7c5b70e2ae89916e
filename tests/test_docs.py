"""README.md is a one-page quick start and docs/ the manual: every relative link in them leads to a file (and
a heading) that exists, the configuration page lists exactly the choices conf/ holds, and the results log
is dated. (The blocks a command writes into docs/ are compared in tests/tools/test_docs.py.)"""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page (code blocks skipped)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        found.add(slug)
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file, or whose #anchor in that file, does not exist."""
    broken = []
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    return broken


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    assert len(PAGES) > 10
    assert {str(p.relative_to(ROOT)): broken_links(p) for p in PAGES if broken_links(p)} == {}


def test_the_link_checker_sees_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A `key`, and more\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md) [ok](other.md#a-key-and-more) [ok](#page) [web](https://x.org/y)\n"
                    "# Page\n[gone](missing.md) [no heading](other.md#nothing) ![img](missing.png)\n"
                    "```\n[in code](missing2.md)\n```\n")
    assert broken_links(page) == ["missing.md", "other.md#nothing"]


def test_the_readme_is_a_one_page_quick_start_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    setup = text[text.index("```bash"):]
    setup = setup[: setup.index("```", 3)]
    assert "\nmake run " in setup and "\nmake test " in setup
    # every page of docs/ is reachable from the README, through docs/README.md at most
    index = (ROOT / "docs" / "README.md").read_text()
    linked = {Path(t).name for t in LINK.findall(text) + LINK.findall(index)}
    assert {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"} <= linked


def configuration_table() -> dict[str, list[str]]:
    """Group -> the choices the groups table of docs/configuration.md names (backticked words of its 2nd cell)."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text[text.index("| group |"):]
    rows = [line for line in table[: table.index("\n\n")].splitlines()[2:]]
    return {re.search(r"`([^`]+)`", row.split("|")[1]).group(1): re.findall(r"`([\w.\-]+)`( \(default)?",
                                                                             row.split("|")[2]) for row in rows}


def config_defaults() -> dict[str, str | None]:
    """Group -> its choice in conf/config.yaml's defaults list."""
    defaults = {}
    for item in yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["defaults"]:
        if isinstance(item, dict):
            (group, choice), = item.items()
            defaults[group.removeprefix("optional ")] = choice
    return defaults


def test_the_configuration_page_lists_every_group_and_choice_of_conf():
    table = configuration_table()
    groups = {p.name for p in (ROOT / "conf").iterdir() if p.is_dir()} - {"base"}  # base: shared, not a group
    assert set(table) == groups
    defaults = config_defaults()
    for group, named in table.items():
        choices = {choice for choice, _ in named}
        on_disk = {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}
        if group == "local":  # default.yaml is each machine's own, git-ignored
            on_disk |= {"default"}
        assert choices == on_disk, group
        marked = [choice for choice, mark in named if mark]
        assert marked == ([defaults[group]] if defaults[group] and group != "local" else []), group


def test_every_row_of_the_results_log_is_dated():
    text = (ROOT / "docs" / "results.md").read_text()
    table = text[text.index("| what |"):]
    rows = table[: table.index("\n\n")].splitlines()[2:]
    assert len(rows) > 10
    undated = [row.split("|")[1].strip() for row in rows
               if not re.match(r" (20\d\d-\d\d-\d\d\b|— )", row.split("|")[3])]
    assert undated == []


def test_the_arms_table_lists_every_preset_with_its_training_protocol():
    text = (ROOT / "docs" / "reproducing-the-paper.md").read_text()
    table = text[text.index("| preset |"):]
    header, _, *rows = table[: table.index("\n\n")].splitlines()
    column = [c.strip() for c in header.split("|")].index("training protocol")
    shown = {re.search(r"`(\w+)`", row.split("|")[1]).group(1): row.split("|")[column].strip() for row in rows}
    presets = {p.stem: p for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    assert set(shown) == set(presets)
    for name, path in presets.items():
        chosen = [d["override /protocol"] for d in yaml.safe_load(path.read_text()).get("defaults", [])
                  if isinstance(d, dict) and "override /protocol" in d]
        assert shown[name] == (chosen[0] if chosen else config_defaults()["protocol"]), name


def test_the_keys_table_gives_each_keys_default_as_the_config_composes_it():
    """docs/configuration.md's "Keys outside the groups": each single key's default column is what
    `python run.py --cfg job` prints for it (experiment_name once said seal_evolving where the config says null)."""
    from omegaconf import OmegaConf

    from tests.test_configs import compose_with

    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text[text.index("| key | default |"):]
    rows = table[: table.index("\n\n")].splitlines()[2:]
    cfg = compose_with()
    checked = 0
    for row in rows:
        key, default = (re.fullmatch(r"`([^`]+)`", cell.strip()) for cell in row.split("|")[1:3])
        if key is None or default is None or "*" in key.group(1) or "," in key.group(1):
            continue  # several keys in one row, or a default said in words
        value = OmegaConf.select(cfg, key.group(1))
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        if isinstance(value, list):
            shown = "[" + ", ".join(value) + "]"
        assert default.group(1) == shown, key.group(1)
        checked += 1
    assert checked >= 7


def test_every_folder_the_docs_write_tables_to_is_ignored_by_git():
    """The README's and the docs' `--out <folder>` commands leave nothing for `git status` to show."""
    import subprocess

    folders = {m for page in PAGES for m in re.findall(r"--out ([^\s`]+)", page.read_text())
               if not m.startswith(("DIR", "<", "$"))}
    assert "outputs/tables" in folders
    for folder in folders:
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{folder}/tables.md"], cwd=ROOT)
        assert ignored.returncode == 0, f"{folder} is not git-ignored"
