"""Which optional install brings a package, and the error that says so.

The core install is the Beam stage (apache-beam, pyarrow, numpy); TensorFlow, Beam's Google Cloud
packages and the plotting library come with extras. A module of ours that needs one of them calls
`require` before importing it, so a user without it reads the install command, not a bare
`ModuleNotFoundError`; the command-line programs turn that into exit status 2 with the same line.

Example:
  >>> install_hint("tensorflow")
  "pip install 'sparseflow[tf]'"
  >>> missing_extra(ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow"))
  "tensorflow is not installed: pip install 'sparseflow[tf]'"
  >>> missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None
  True
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "install_hint", "missing_extra", "require"]

# package (as imported) -> the extra of pyproject.toml that installs it
EXTRAS = {"tensorflow": "tf", "google.auth": "gcp", "matplotlib": "plots", "torch": "bench"}


class MissingExtraError(ModuleNotFoundError):
    """A package that one of the extras installs is missing; the message is the install command."""


def install_hint(package: str) -> str:
    """The pip command that installs `package` with this project (a key of `EXTRAS`)."""
    return f"pip install 'sparseflow[{EXTRAS[package]}]'"


def require(package: str, user: str) -> None:
    """Raises MissingExtraError naming `user` and the install command when `package` cannot be imported.

    Looks the package up without importing it (`importlib.util.find_spec`).
    """
    try:
        found = importlib.util.find_spec(package) is not None
    except (ModuleNotFoundError, ValueError):  # a parent package missing, or blocked in sys.modules
        found = False
    if not found:
        raise MissingExtraError(f"{user} needs {package}, which is not installed: {install_hint(package)}",
                                name=package)


def missing_extra(error: BaseException) -> str | None:
    """One line for a missing package that an extra installs, or None when `error` is about anything else."""
    if isinstance(error, MissingExtraError):
        return str(error)
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    for package in EXTRAS:
        if name and (name == package or name.startswith(package + ".") or package.startswith(name + ".")):
            return f"{package} is not installed: {install_hint(package)}"
    return None
