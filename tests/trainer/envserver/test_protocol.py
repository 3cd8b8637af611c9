"""The env servers' wire format (envserver/protocol.py): messages round trip exactly, objects are refused."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envserver import protocol


def test_messages_round_trip_and_refuse_objects() -> None:
    message = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "nested": [np.array([True, False]), {"b": np.zeros((0, 4), np.int64)}],
        "scalar": np.float32(0.5),
        "text": "x",
        "none": None,
    }
    decoded = protocol.decode(protocol.encode(message))
    np.testing.assert_array_equal(decoded["a"], message["a"])
    assert decoded["a"].dtype == np.float32 and decoded["nested"][0].dtype == np.bool_
    assert decoded["nested"][1]["b"].shape == (0, 4)
    assert (decoded["scalar"], decoded["text"], decoded["none"]) == (0.5, "x", None)
    with pytest.raises(TypeError, match="dtype object"):
        protocol.encode({"a": np.array([object()])})
    forged = protocol.encode({"a": np.zeros(2)}).replace(b"<f8", b"|O8")
    with pytest.raises(protocol.ProtocolError, match="not accepted"):
        protocol.decode(forged)
