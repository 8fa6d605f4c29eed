"""Find the custom-gradient functions and Keras layers in a user's code: :func:`discover`.

A TARGET is a path to a ``.py`` file, a directory (its ``*.py`` files, not recursive; ``__init__.py`` and
``__main__.py`` are skipped, a private module such as ``_fixed_point_ops.py`` is not) or an importable module name. Importing runs the module, which is the point:
it is the operator's own code, named on their own command line (or in ``GRADIENT_EXPLORER_OPS``).
While a file is imported its directory is first on ``sys.path``, so it can import its neighbours.

Only what the module itself defines at module level counts: functions decorated with
``@tf.custom_gradient`` and ``keras.layers.Layer`` subclasses whose ``__module__`` is the module
(imported ones and plain helpers are ignored). A target that does not exist, fails to import, or
defines nothing to check is a :class:`LoadError` in the result, never an exception.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import ops

_counter = itertools.count(1)


@dataclass(frozen=True)
class LoadError:
    """Why a target gave nothing to check: ``error`` is the exception's name, ``message`` its text."""

    target: str
    error: str
    message: str

    def __str__(self) -> str:
        return f"{self.target}: {self.error}: {self.message}"


@dataclass(frozen=True)
class Found:
    """A custom-gradient function or a Layer subclass, by name, and the module that defines it."""

    name: str
    module: str
    obj: Any


@dataclass
class Discovered:
    functions: list[Found] = field(default_factory=list)
    layers: list[Found] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)

    def extend(self, other: Discovered) -> None:
        self.functions += other.functions
        self.layers += other.layers
        self.errors += other.errors


def _is_layer_class(candidate: Any) -> bool:
    import keras

    return isinstance(candidate, type) and issubclass(candidate, keras.layers.Layer)


def _defined_in(candidate: Any, module: ModuleType) -> bool:
    if isinstance(candidate, type):
        return candidate.__module__ == module.__name__
    return getattr(ops.user.undecorated(candidate), "__module__", None) == module.__name__


def members(module: ModuleType) -> Discovered:
    """The custom-gradient functions and Layer subclasses ``module`` defines at module level, in source order."""
    found = Discovered()
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        if _is_layer_class(value) and _defined_in(value, module):
            found.layers.append(Found(name, module.__name__, value))
        elif ops.is_custom_gradient(value) and _defined_in(value, module):
            found.functions.append(Found(name, module.__name__, value))
    return found


def _error(target: str, error: BaseException) -> LoadError:
    message = " ".join(str(error).split()) or "(no message)"
    return LoadError(target, type(error).__name__, message)


def _import_file(path: Path) -> ModuleType:
    name = path.stem if path.stem.isidentifier() else f"user_module_{next(_counter)}"
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) != str(path):
        name = f"{name}_{next(_counter)}"  # do not shadow another module of the same name
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and Keras look modules up by name
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def _load(target: str, load) -> Discovered:
    try:
        module = load()
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a broken user module is a result, not a crash
        return Discovered(errors=[_error(target, error)])
    return members(module)


def _nothing(target: str) -> LoadError:
    return LoadError(
        target,
        "NothingToCheck",
        "no module-level @tf.custom_gradient function or keras.layers.Layer subclass is defined there",
    )


def discover(target: str | Path) -> Discovered:
    """Every custom-gradient function and Layer subclass in ``target`` (file, directory or module name)."""
    text = str(target).strip()
    if not text:  # Path("") is the working directory: never import a folder nobody named
        return Discovered(errors=[LoadError(repr(str(target)), "ValueError", "an empty target names nothing")])
    path = Path(text)
    looks_like_path = path.suffix == ".py" or "/" in text or "\\" in text or path.exists()
    if looks_like_path:
        if not path.exists():
            return Discovered(errors=[LoadError(text, "FileNotFoundError", "no such file or directory")])
        if path.is_dir():
            result = Discovered()
            files = sorted(p for p in path.glob("*.py") if not p.name.startswith("__"))
            for file in files:
                result.extend(_load(str(file), lambda file=file: _import_file(file.resolve())))
            if not result.functions and not result.layers and not result.errors:
                result.errors.append(_nothing(text) if files else LoadError(text, "NothingToCheck", "no .py files"))
            return result
        if path.suffix != ".py":
            return Discovered(errors=[LoadError(text, "ValueError", "not a .py file, a directory or a module name")])
        result = _load(text, lambda: _import_file(path.resolve()))
    else:
        if not all(part.isidentifier() for part in text.split(".")):
            return Discovered(errors=[LoadError(text, "ValueError", "not a .py file, a directory or a module name")])
        result = _load(text, lambda: importlib.import_module(text))
    if not result.functions and not result.layers and not result.errors:
        result.errors.append(_nothing(text))
    return result


DECLARATIONS = "GRADIENT_EXPLORER"  # module-level dict: function name -> from_function keywords (+ "name")
DECLARED_KEYWORDS = ("forward", "points", "ranges", "title", "justification", "input_shapes", "domain")


def declarations(item: Found) -> dict[str, Any]:
    """The :func:`ops.from_function` keywords the function's module declares for it in
    ``GRADIENT_EXPLORER = {"fn": {...}}``, under its module-level name or its own ``__name__`` (a factory's
    inner function: ``spike = make_spike(10.0)`` is found as "spike" and as the inner def's name) (only :data:`DECLARED_KEYWORDS`; e.g. ``"input_shapes": [((4, 3),
    (3,)), ((2, 5), (5,))]``). Empty if none; a value that is not a dict is ignored."""
    module = module_of(item.obj)
    table = getattr(module, DECLARATIONS, None)
    if not isinstance(table, dict):
        return {}
    own = getattr(ops.user.undecorated(item.obj), "__name__", None) if callable(item.obj) else None
    declared = next((table[key] for key in (item.name, own) if key and isinstance(table.get(key), dict)), None)
    if not isinstance(declared, dict):
        return {}
    return {key: declared[key] for key in DECLARED_KEYWORDS if key in declared}


def declared_for(fn: Any) -> dict[str, Any]:
    """:func:`declarations` for a function object (the guardrail's and the notebook's): what its module's
    ``GRADIENT_EXPLORER`` dict declares under the name the module binds it to. Empty if none."""
    module = module_of(fn)
    if module is None or not isinstance(getattr(module, DECLARATIONS, None), dict):
        return {}
    name = module_level_name(fn) or getattr(ops.user.undecorated(fn), "__name__", "")
    return declarations(Found(name, module.__name__, fn))


def module_level_name(fn: Any) -> str | None:
    """The name ``fn``'s module binds it to (``spike`` for ``spike = make_spike(10.0)``), None if it binds none."""
    module = module_of(fn)
    names = [name for name, value in vars(module).items() if value is fn] if module is not None else []
    return names[0] if names else None


def module_of(obj: Any) -> ModuleType | None:
    """The module that defines a function or class (for a layer's sibling functions)."""
    target = obj if isinstance(obj, type) else ops.user.undecorated(obj) if ops.is_custom_gradient(obj) else obj
    return inspect.getmodule(target)
