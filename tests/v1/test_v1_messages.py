from __future__ import annotations

import msgspec
import pytest
from v1_support import engine_request

from tandem.core.child_failure import ChildError
from tandem.core.outputs.request_output import Logprob
from tandem.v1 import messages as m


def test_requests_round_trip() -> None:
    request = engine_request(
        "r", [1, 2], n=3, seed=7, temperature=0.5, stop=["x"], stop_token_ids=[5], logprobs=2
    )
    add = m.AddRequest(request)
    assert m.to_core.decode(m.encode(add)) == add
    ab = m.Abort(["r"], [("q", 1)])
    assert m.to_core.decode(m.encode(ab)) == ab


def test_core_and_client_messages_round_trip() -> None:
    out = m.CoreOutputs(
        [
            m.CoreOutput("r", 1, [4], [-0.5], [[(4, -0.5, 1)]], None, "stop", 4, 8),
            m.CoreOutput("r", 2, [], finish_reason="error", error="ValueError: p"),
        ]
    )
    assert m.from_core.decode(m.encode(out)) == out
    res = m.Results(
        [
            m.Result(
                "r",
                [None, {2: Logprob(-1.0, 1, "a")}],
                [m.Completion(0, "t", [4], -0.5, None, "length", None)],
                True,
                0,
                "ValueError: p",
            )
        ]
    )
    assert m.to_client.decode(m.encode(res)) == res
    failed = m.Failed("core", 1, True, ChildError("ValueError", "bad", "tb"))
    for msg in (m.Ready("core", 1, 9, "torch"), failed, m.Failed("rank", 2, False, ended="x")):
        assert m.to_client.decode(m.encode(msg)) == msg
    assert m.decode_failed(m.encode(failed)) == failed
    for junk in (b"", m.encode(failed)[:-3], m.encode(m.Ready("core", 1))):
        assert m.decode_failed(junk) is None  # nothing, a cut report, another message


def test_wrong_message_on_a_path_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        m.to_core.decode(m.encode(m.Ready("core", 1, 0)))
