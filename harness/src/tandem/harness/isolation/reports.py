"""Test reports and warnings as plain data, to cross from a child to its parent."""

from __future__ import annotations

import functools
import pickle
import sys
import warnings
from typing import Any

import pytest

from . import wire
from .messages import Report, Warned


def report_frame(config: pytest.Config, report: pytest.TestReport) -> bytes:
    """A report as the frame (``wire.frame``) that carries it across: pickled as it is
    (both ends run the same pytest), else as plain data through pytest's own serialisation
    hook. One pickling of the message, the report inside it, not one of each.

    A report whose class keeps its state in a plain ``__dict__`` (pytest's own, most
    plugins') crosses as its class and that dict: what pickle would rebuild it from, without
    its generic reduce step (about half of a report's pickling cost, three reports a test).
    """
    report.user_properties = [(str(k), _plain(v)) for k, v in report.user_properties]
    cls = type(report)
    whole: Any = (cls, report.__dict__) if _plain_state(cls) else report
    try:
        return wire.frame(Report(report.nodeid, whole=whole))
    except Exception:  # a plugin's longrepr or attribute that does not pickle
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        try:
            pickle.dumps(data, pickle.HIGHEST_PROTOCOL)
        except Exception:  # a subtest's parameters, say: their reprs cross instead
            data = _picklable(data)
        return wire.frame(Report(report.nodeid, data=data))


def load_report(config: pytest.Config, message: Report) -> pytest.TestReport:
    """The report ``report_frame`` sent, rebuilt in this process."""
    whole = message.whole
    if whole is not None:
        if not isinstance(whole, tuple):
            return whole  # type: ignore[no-any-return]
        cls, state = whole
        report = cls.__new__(cls)
        report.__dict__.update(state)
        return report  # type: ignore[no-any-return]
    data = message.data or {}
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    report.user_properties = [tuple(pair) for pair in data.get("user_properties", [])]
    return report


_OBJECT_GETSTATE = getattr(object, "__getstate__", None)  # Python 3.11 on


@functools.cache
def _plain_state(cls: type) -> bool:
    """Whether pickle would rebuild an instance of ``cls`` as ``cls.__new__(cls)`` and its
    ``__dict__``: no reduce, state or slots of its own anywhere in its classes."""
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is _OBJECT_GETSTATE
        and not hasattr(cls, "__setstate__")
        and not hasattr(cls, "__getnewargs_ex__")
        and not hasattr(cls, "__getnewargs__")
        and all("__slots__" not in vars(k) for k in cls.__mro__)
    )


def _picklable(value: Any) -> Any:
    """``value`` with every leaf that is not plain data replaced by its ``repr``."""
    if isinstance(value, dict):
        return {str(k): _picklable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_picklable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_picklable(v) for v in value)
    return _plain(value)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def dump_warning(message: warnings.WarningMessage, nodeid: str) -> Warned:
    category = message.category
    return Warned(
        message=str(message.message),
        category=f"{category.__module__}:{category.__qualname__}",
        filename=message.filename,
        lineno=message.lineno,
        nodeid=nodeid,
    )


def load_warning(data: Warned) -> warnings.WarningMessage:
    """The ``warnings.WarningMessage`` that ``dump_warning`` sent (UserWarning if unknown)."""
    module, _, name = data.category.partition(":")
    category: Any = sys.modules.get(module)
    for part in name.split("."):
        category = getattr(category, part, None)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        category = UserWarning
    return warnings.WarningMessage(category(data.message), category, data.filename, data.lineno)
