"""User-facing errors: the CLI prints `str(err)` as one line and exits with code 2.

`user_file(path, what, action)` is the one place that turns OS and decoding errors on a user's
file (reading or writing) into such a line, naming the file and the fix.
"""
from __future__ import annotations

import os
from contextlib import contextmanager


def one_line(text: str) -> str:
    """`text` with line breaks and other unprintable characters escaped (\\n, \\r, \\x00, \\u200b), so a
    message that echoes a user's value stays on one line."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class UserError(ValueError):
    """Bad input from the user (config, file, flag). The message names the field and the fix;
    it is always one line (unprintable characters of echoed values are escaped)."""

    def __init__(self, message: str = ""):
        super().__init__(one_line(message))


def file_error(err: BaseException, path=None, what: str = "file", action: str = "read",
               parameter: bool = False) -> UserError:
    """A one-line UserError for an OSError / UnicodeDecodeError on `path`, starting with `what`.
    With parameter=True `what` is a library function's parameter name and the error a
    ParameterError (the CLI names its own flag or argument instead)."""
    path = path if path is not None else getattr(err, "filename", None) or "?"
    if isinstance(err, UnicodeDecodeError):
        detail = f"'{path}' is not UTF-8 text (byte {err.start}); give a text file (re-save it as UTF-8)"
    else:
        reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
        if action == "write":
            fix = "choose a writable folder (the parent must be an existing or creatable directory)"
        else:
            fix = "check the path and that the file is readable"
        detail = f"cannot {action} '{path}' ({reason}); {fix}"
    return ParameterError(what, detail) if parameter else UserError(f"{what}: {detail}")


@contextmanager
def user_file(path: str | os.PathLike, what: str = "file", action: str = "read", parameter: bool = False):
    """Context manager: OSError / UnicodeDecodeError inside becomes a one-line UserError
    (a ParameterError naming the parameter `what` with parameter=True; see file_error)."""
    try:
        yield
    except UserError:
        raise
    except (OSError, UnicodeDecodeError) as err:
        raise file_error(err, path, what, action, parameter) from None


class ParameterError(UserError):
    """A bad value of a library function's parameter: `str(err)` is 'parameter: message'. The CLI
    names the flag instead (`flag_message`)."""

    def __init__(self, parameter: str, message: str):
        self.parameter, self.message = parameter, message
        super().__init__(f"{parameter}: {message}")

    def flag_message(self, flags: dict[str, str] | None = None) -> str:
        """The message with the parameter spelt as its command-line flag: `flags[parameter]` where
        the command calls it differently (e.g. {"output_path": "--output", "input_path": "JOBS"}),
        else --parameter-name."""
        flag = (flags or {}).get(self.parameter) or f"--{self.parameter.replace('_', '-')}"
        return f"{flag}: {self.message}"
