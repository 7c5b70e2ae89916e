"""Errors a user can cause: reported in one sentence that names the fix, without a traceback."""


class UserError(Exception):
    """A bad override, a missing file, a model that does not fit, ..."""
