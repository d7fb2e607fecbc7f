"""A bounded pre-flight check that gs:// paths can be reached with credentials, before Beam or TensorFlow try.

Without credentials Beam's GCS filesystem retries the credential lookup with
backoff, then connects anonymously and retries the listing: minutes, and a
traceback per retry. One lookup of Google's application default credentials,
given at most `LOOKUP_SECONDS`, says the same in one line.

Example:
  >>> check_cloud_credentials({"--input": "logs/*.tsv", "--output": "out"})  # local paths: nothing to check
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from pipelines.errors import UsageError
from sparse_io.extras import install_hint

__all__ = ["GCP_INSTALL_HINT", "LOOKUP_SECONDS", "check_cloud_credentials", "credentials_problem"]

LOOKUP_SECONDS = 8.0
_REMOTE_SCHEMES = ("gs://",)
GCP_INSTALL_HINT = install_hint("google.auth")
_HOW_TO = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
           "service-account key file")


def check_cloud_credentials(paths: Mapping[str, str | None], *, timeout: float = LOOKUP_SECONDS,
                            lookup: Callable[[], object] | None = None) -> None:
    """Raises UsageError naming the first gs:// path in `paths` (flag -> path) when no credentials are found.

    Args:
      paths: flag name -> path; None and local paths are skipped.
      timeout: seconds the credential lookup may take before it counts as failed.
      lookup: the credential lookup (default `google.auth.default`); it raises when none are found.

    Raises:
      UsageError: one line, "<flag> <path>: no Google Cloud credentials ...".
    """
    remote = [(flag, path) for flag, path in paths.items() if path and path.startswith(_REMOTE_SCHEMES)]
    if not remote:
        return
    problem = credentials_problem(timeout=timeout, lookup=lookup)
    if problem:
        flag, path = remote[0]
        raise UsageError(f"{flag} {path}: {problem}")


def credentials_problem(*, timeout: float = LOOKUP_SECONDS, lookup: Callable[[], object] | None = None) -> str | None:
    """None when Google's default credentials are found within `timeout` seconds, else why not (one line).

    Without the google-auth package (installed by the `gcp` extra, with Beam's Google Cloud I/O) no gs://
    path can be read at all, and the answer says which install brings it.
    """
    if lookup is None:
        try:
            import google.auth
        except ImportError:
            return f"gs:// paths need Beam's Google Cloud packages: {GCP_INSTALL_HINT}"
        lookup = google.auth.default
    outcome: dict[str, Exception] = {}

    def run() -> None:
        try:
            lookup()
        except Exception as e:  # whatever failed is said in the one line below
            outcome["error"] = e

    # A daemon thread: a lookup stuck on the network must not keep the program alive after it gives up.
    thread = threading.Thread(target=run, name="credential-lookup", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return f"no Google Cloud credentials found within {timeout:g} s; {_HOW_TO}"
    if "error" in outcome:
        text = str(outcome["error"]).strip()
        # google.auth's first sentence says which source failed ("File /x was not found"); the rest is a link.
        reason = text.splitlines()[0].split(". ")[0].rstrip(".")[:160] if text else type(outcome["error"]).__name__
        if reason.startswith("Your default credentials were not found"):
            reason = ""
        return "no Google Cloud credentials found" + (f" ({reason})" if reason else "") + f"; {_HOW_TO}"
    return None
