"""What went wrong talking to the Hugging Face hub, told apart once for model downloads (t2t.checkpoints.hf) and
dataset loads (t2t.data.sources), each of which turns the answer into its own sentence.

The installed ``huggingface_hub`` and ``datasets`` differ across versions in their error classes and in
the HTTP library under them, and ``datasets`` wraps the hub's errors, so the whole cause chain is read and
HTTP transport errors are recognised by class name.
"""

from __future__ import annotations

_CONNECTION_ERRORS = {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError", "ConnectError",
                      "ConnectTimeout", "ReadTimeout", "Timeout", "TimeoutError", "TimeoutException",
                      "TransportError", "NetworkError", "ProxyError", "SSLError"}
_NOT_FOUND_ERRORS = {"FileNotFoundError", "EntryNotFoundError", "RevisionNotFoundError"}


def hub_failure(error: BaseException, offline: bool) -> str:
    """``"gated"``, ``"not_found"``, ``"refused"`` (HTTP 401/403), ``"rate_limited"`` (HTTP 429),
    ``"offline"`` (offline mode and no cached copy), ``"unreachable"`` (no connection) or ``"other"``.

    ``offline``: whether the caller's library was in offline mode. LocalEntryNotFoundError counts as out
    of reach, not as absent: it means the hub was not asked (or not reached) and the cache had no copy.
    """
    chain = list(_causes(error))
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    statuses = {getattr(getattr(e, "response", None), "status_code", None) for e in chain}
    if "GatedRepoError" in names:
        return "gated"
    if "RepositoryNotFoundError" in names or 404 in statuses:
        return "not_found"  # also a private repository without a token: the hub answers 401 for both
    if statuses & {401, 403}:
        return "refused"
    if 429 in statuses:
        return "rate_limited"
    if names & _CONNECTION_ERRORS:
        return "offline" if offline else "unreachable"
    if names & _NOT_FOUND_ERRORS:
        return "not_found"
    return "other"


def _causes(error: BaseException):
    """``error`` and the exceptions it was raised from."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
