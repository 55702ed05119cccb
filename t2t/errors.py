"""The one exception type for bad input: its message is a single sentence naming the thing and the fix.

The CLIs print it as ``error: <message>`` and exit with status 2, never a traceback.
"""


class T2TError(Exception):
    """A user-facing error (unknown name, missing or malformed file, bad setting, corrupt checkpoint)."""
