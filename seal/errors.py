"""Errors a user can cause: reported in one sentence that names the fix, without a traceback."""

import errno
import os

# what a folder a user chose does when it cannot take a command's files
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST,
              errno.ENAMETOOLONG)


# what a write into an open file raises when the disk fills: the OSError carries no file name, the caller knows it
FULL = (errno.ENOSPC, errno.EDQUOT)


def unwritable(exc: BaseException | None) -> bool:
    """Whether `exc` is a file a command could not make or write (not a bug in the code: a folder's problem)."""
    return isinstance(exc, OSError) and exc.errno in UNWRITABLE and (exc.filename is not None or exc.errno in FULL)


def cannot_write(exc: OSError, advice: str, where: str | os.PathLike | None = None) -> str:
    """One sentence for a file that could not be made or written: the file (the error's, else `where`: the file or
    folder the command was writing), why, and `advice` (the way out)."""
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EROFS: "the file system is read-only", errno.ENOTDIR: "a part of the path is a file, not a folder",
           errno.EEXIST: "a file of that name is in the way", errno.ENAMETOOLONG: "the name is too long"}
    name = exc.filename if exc.filename is not None else where
    what = f"cannot write {os.path.abspath(name)}" if name is not None else "cannot write"
    return f"{what}: {why.get(exc.errno, 'permission denied')}; {advice}"


def check_writable(folder: str | os.PathLike) -> None:
    """Raise the OSError that making `folder` and writing into it would raise (seal.errors.unwritable), before
    anything is made: for a command that must refuse before it asks or submits, not half-way through."""
    path = os.path.abspath(folder)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), path)
    made = path
    while not os.path.lexists(made):
        made = os.path.dirname(made)
    if os.path.islink(made) and not os.path.exists(made):  # a link to nothing: mkdir finds its name taken
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), made)
    if not os.path.isdir(made):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    longest = os.pathconf(made, "PC_NAME_MAX")
    if any(len(os.fsencode(part)) > longest for part in os.path.relpath(path, made).split(os.sep)):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    if not os.access(made, os.W_OK | os.X_OK):
        read_only = os.statvfs(made).f_flag & os.ST_RDONLY
        code = errno.EROFS if read_only else errno.EACCES
        raise OSError(code, os.strerror(code), path)


class UserError(Exception):
    """A bad override, a missing file, a model that does not fit, ..."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook (notebooks/inspect_run.ipynb): the sentence alone."""
        return [f"error: {self}"]


class Interrupted(BaseException):
    """The user stopped the run (Ctrl-C). Its message says in one sentence what was kept and how to go on
    (empty: the run's own processes have said it); seal.tasks prints it and exits with 130, no traceback."""
