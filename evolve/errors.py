"""Errors a user can act on: the CLI prints their message as one line, never a traceback."""


class EvolveError(Exception):
    """A problem with the user's input, configuration or machine, explained in one line."""


class SpecError(EvolveError):
    """A kernel's launch spec or an expression in it is malformed."""


def describe(exc: BaseException) -> str:
    """An exception raised by a user's own code, on one line, with the file and line it came from."""
    text = f"{exc.__class__.__name__}: {exc}".splitlines()[0]
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{text} ({exc.filename}:{exc.lineno})"
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{text} ({tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})" if tb is not None else text
