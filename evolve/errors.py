"""Errors a user can act on: the CLI prints their message as one line, never a traceback."""


class EvolveError(Exception):
    """A problem with the user's input, configuration or machine, explained in one line."""


class SpecError(EvolveError):
    """A kernel's launch spec or an expression in it is malformed."""
