"""Test reports and warnings as plain data, to cross from a child to its parent."""

from __future__ import annotations

import pickle
import sys
import warnings
from typing import Any

import pytest

from .messages import Report, Warned


def dump_report(config: pytest.Config, report: pytest.TestReport) -> Report:
    """A report ready to cross: pickled as it is (both ends run the same pytest), else as
    plain data through pytest's own serialisation hook."""
    report.user_properties = [(str(k), _plain(v)) for k, v in report.user_properties]
    try:
        return Report(report.nodeid, pickled=pickle.dumps(report, pickle.HIGHEST_PROTOCOL))
    except Exception:  # a plugin's longrepr or attribute that does not pickle
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        try:
            pickle.dumps(data, pickle.HIGHEST_PROTOCOL)
        except Exception:  # a subtest's parameters, say: their reprs cross instead
            data = _picklable(data)
        return Report(report.nodeid, data=data)


def load_report(config: pytest.Config, message: Report) -> pytest.TestReport:
    """The report ``dump_report`` made, rebuilt in this process."""
    if message.pickled:
        report: pytest.TestReport = pickle.loads(message.pickled)
        return report
    data = message.data or {}
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    report.user_properties = [tuple(pair) for pair in data.get("user_properties", [])]
    return report


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
