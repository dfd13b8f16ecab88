"""The parent's reading of what a child sends about one test: reports, warnings, its end.

A report is logged as pytest would log its own; a warning is recorded as raised here; the
end of a test is checked for proof of execution (every phase reported); ``pytest.exit``
and ``KeyboardInterrupt`` in the child end the run here too (``settle``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from . import subtests
from .failures import Log, Outcome
from .messages import ChildFailed, Done, Exit, Interrupted, Message, Report, Warned
from .reports import load_report, load_warning


def take(
    config: pytest.Config,
    message: Message,
    item: pytest.Item,
    log: Log,
    outcome: Outcome,
    fail: Callable[[str], None],
) -> bool:
    """Handle one message for ``item``; True when the item is over. ``fail(text)`` fails it."""
    match message:
        case Report():
            report = load_report(config, message)
            subtests.count(config, report)
            outcome.reports.append(report)
            log(report)
        case Warned():
            config.hook.pytest_warning_recorded.call_historic(
                kwargs={
                    "warning_message": load_warning(message),
                    "when": "runtest",
                    "nodeid": message.nodeid,
                    "location": None,
                }
            )
        case Done(nodeid):
            outcome.done = True
            whens = {r.when: r for r in outcome.reports}
            ran = "call" in whens or ("setup" in whens and not whens["setup"].passed)
            if nodeid != item.nodeid or not ran or "teardown" not in whens:
                fail(
                    "proof of execution: the child finished "
                    f"{item.nodeid} without reporting all of its phases"
                )
            return True
        case Exit(reason, returncode):
            outcome.exit = (reason, returncode)
            outcome.done = True
            return True
        case Interrupted(where):
            outcome.interrupted = where
            outcome.done = True
            return True
        case ChildFailed(text):
            fail("tandem-harness child error:\n" + text)
            outcome.done = True
            return True
    return False


def settle(outcome: Outcome) -> Outcome:
    """``pytest.exit`` or ``KeyboardInterrupt`` in the child: the same here."""
    if outcome.interrupted:
        raise KeyboardInterrupt(outcome.interrupted)
    if outcome.exit is not None:
        reason, code = outcome.exit
        pytest.exit(reason, returncode=code)
    return outcome
