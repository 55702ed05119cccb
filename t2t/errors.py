"""The one exception type for bad input: its message is a single sentence naming the thing and the fix.

The CLIs print it as ``error: <message>`` and exit with status 2, never a traceback.
"""


class T2TError(Exception):
    """A user-facing error (unknown name, missing or malformed file, bad setting, corrupt checkpoint)."""


def error_summary(e: BaseException) -> str:
    """The first sentence of an exception's message (reasons are quoted inside our one sentence)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0].split(". ")[0].rstrip(".")
