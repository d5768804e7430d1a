"""Which classes a file may name. A checkpoint's stored config and an export's `config.json` name
the classes to build by import path; a class is imported only when its path lies under a trusted
package, so a file someone hands you can name `os.system` and nothing runs. The callers
(`treernn.checkpoints`, `treernn.models.export`) choose the packages and word the refusal; this
module holds the check itself, without torch or Lightning, so that reading an export stays light.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Literal

#: comma-separated packages a user trusts beside treernn's own (a model package of their own)
TRUSTED_ENV = "TREERNN_TRUSTED_MODULES"


def user_prefixes() -> tuple[str, ...]:
    """The packages named in `TREERNN_TRUSTED_MODULES`, each as an import-path prefix."""
    extra = [p.strip() for p in os.environ.get(TRUSTED_ENV, "").split(",") if p.strip()]
    return tuple(p if p.endswith(".") else p + "." for p in extra)


class UntrustedClass(Exception):
    """Why a named class was refused: `"untrusted"` (outside the trusted packages; nothing was
    imported), `"missing"` (no such class in this version) or `"not a class"`."""

    def __init__(self, why: Literal["untrusted", "missing", "not a class"]) -> None:
        super().__init__(why)
        self.why = why


def import_trusted(target: Any, prefixes: tuple[str, ...]) -> type:
    """The class `target` names, imported only if its path starts with one of `prefixes`;
    else `UntrustedClass` saying why."""
    if not isinstance(target, str) or not target.startswith(prefixes):
        raise UntrustedClass("untrusted")
    module_name, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except ModuleNotFoundError as error:
        if error.name is not None and not _names_part_of(module_name, error.name):
            # the module exists and needs a package that is not installed: say which, not
            # that the class does not exist
            from treernn.extras import EXTRAS, missing

            if error.name.partition(".")[0] in EXTRAS:
                raise missing(error.name, f"{target}") from None
            raise
        raise UntrustedClass("missing") from None
    except (ImportError, AttributeError, ValueError):
        raise UntrustedClass("missing") from None
    if not inspect.isclass(found):
        raise UntrustedClass("not a class")
    return found


def _names_part_of(module_name: str, missing: str) -> bool:
    """Whether the module found missing is ``module_name`` or a package above it."""
    return module_name == missing or module_name.startswith(missing + ".")
