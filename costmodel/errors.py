"""User-facing errors: the CLI prints `str(err)` as one line and exits with code 2."""


class UserError(ValueError):
    """Bad input from the user (config, file, flag). The message names the field and the fix."""
