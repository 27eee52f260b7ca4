"""User-facing errors: the CLI prints `str(err)` as one line and exits with code 2."""


class UserError(ValueError):
    """Bad input from the user (config, file, flag). The message names the field and the fix."""


class ParameterError(UserError):
    """A bad value of a library function's parameter: `str(err)` is 'parameter: message'. The CLI
    names the flag instead (`flag_message`)."""

    def __init__(self, parameter: str, message: str):
        self.parameter, self.message = parameter, message
        super().__init__(f"{parameter}: {message}")

    def flag_message(self) -> str:
        """The message with the parameter spelt as its command-line flag."""
        return f"--{self.parameter.replace('_', '-')}: {self.message}"
