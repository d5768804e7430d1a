"""The Hugging Face Hub's methods on a trained model: ``save_pretrained``, ``from_pretrained`` and
``push_to_hub`` come from ``huggingface_hub``'s ``ModelHubMixin``, an optional dependency
(``pip install "treernn[hub]"``).

`HubMixin` is the base of `treernn.models.model.Model`: the mixin itself where
``huggingface_hub`` is installed, else a stand-in whose three methods each say, in one line, what
to install. ``treernn.models.model`` implements the mixin's two hooks with the export format of
`treernn.models.export`, so that what these methods write, read and push is exactly the directory
``python -m treernn export`` writes. ``treernn.models.model`` imports this module, and with it
``huggingface_hub`` where it is installed (half a second; ``import treernn`` imports neither).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from treernn.errors import UserError

INSTALL_HINT = 'pip install "treernn[hub]"'

try:  # the hub extra
    from huggingface_hub import ModelHubMixin
except ImportError:  # without it the methods exist and say how to get them
    ModelHubMixin = None


class HubUnavailableError(UserError, ImportError):
    """``huggingface_hub`` is not installed (the user's set-up: one line, no traceback)."""


class HubDownloadError(UserError, OSError):
    """A Hub repository that could not be downloaded (not found, offline, no network)."""


def unavailable(method: str) -> HubUnavailableError:
    return HubUnavailableError(
        f"{method} needs huggingface_hub, which is not installed: {INSTALL_HINT}"
    )


def require(method: str) -> None:
    """Say what to install before ``method`` looks at its arguments."""
    if ModelHubMixin is None:
        raise unavailable(method)


if ModelHubMixin is not None:

    class HubMixin(ModelHubMixin):
        """``huggingface_hub.ModelHubMixin``, as treernn's models take it."""

else:

    class HubMixin:
        """Stands in for ``huggingface_hub.ModelHubMixin`` where it is not installed."""

        def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
            raise unavailable("save_pretrained")

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
            raise unavailable("from_pretrained")

        def push_to_hub(self, *args: Any, **kwargs: Any) -> Any:
            raise unavailable("push_to_hub")


def download(model_id: str, files: list[str], **options: Any) -> Path:
    """The files named ``files`` (no others: no code, no pickles) of the Hub repository
    ``model_id``, downloaded to huggingface_hub's cache; returns their folder. ``options``:
    ``revision``, ``cache_dir``, ``force_download``, ``local_files_only``, ``token``."""
    from huggingface_hub import snapshot_download

    with from_the_hub(model_id):
        return Path(snapshot_download(repo_id=model_id, allow_patterns=files, **options))


@contextmanager
def from_the_hub(model_id: str) -> Iterator[None]:
    """Reading Hub repository ``model_id``: what the Hub refuses (not found, offline, no network,
    a malformed id), in one line. A mistyped local folder, ``models/my-lm``, reads as an
    ``owner/name`` id, so the line names both places it was looked for."""
    from huggingface_hub.utils import HFValidationError

    try:
        yield
    except UserError:
        raise
    except (OSError, HFValidationError) as error:
        reason = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise HubDownloadError(
            f"{model_id}: no such directory here, and the Hugging Face Hub did not give a "
            f"repository of that name ({type(error).__name__}: {reason}). Check the path of a "
            "saved model's directory, or the Hub's owner/name"
        ) from None
