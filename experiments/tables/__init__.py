"""The paper's tables from training runs; `python -m experiments.aggregate` is their command.

- runs: which runs there are below a root, what became of each, the seeds each row expects;
- cells: the rows of Tables 1-3, each cell a mean ± 95% t-interval, and the paper's reference rows;
- differences: seal minus each other arm, paired by seed and entry, with the paired bootstrap;
- write: the Markdown report, the CSVs; figure: the bar charts;
- paper_numbers: the paper's own numbers, cell for cell; like_measured: whether a run was measured as a
  paper number beside it was (tau2's task split);
- columns: what every table holds (BFCL V3's columns, the protocols, the models of a run, the arms).
"""
