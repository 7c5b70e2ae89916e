"""Errors a user can cause: reported in one sentence that names the fix, without a traceback."""


class UserError(Exception):
    """A bad override, a missing file, a model that does not fit, ..."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook (notebooks/inspect_run.ipynb): the sentence alone."""
        return [f"error: {self}"]


class Interrupted(BaseException):
    """The user stopped the run (Ctrl-C). Its message says in one sentence what was kept and how to go on
    (empty: the run's own processes have said it); seal.tasks prints it and exits with 130, no traceback."""
