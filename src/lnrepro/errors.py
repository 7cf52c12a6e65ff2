"""The one exception type the CLI turns into a clear message and exit status 1."""


class LnReproError(Exception):
    """Bad input: the message names the file or config key and what was expected."""
