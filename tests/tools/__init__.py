"""The project's own upkeep, which no user of the method runs: `make mutate` (mutate, mutation_report and the
equivalent mutants' list) and `make docs` (docs: the generated parts of docs/)."""
