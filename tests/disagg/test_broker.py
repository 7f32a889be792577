"""The broker's wire format and channels, on a real Redis server."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.disagg.broker import Broker, Metadata, Notice, PayloadError, decode_states, encode_states, parse_message


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 70), dim=st.integers(1, 96), seed=st.integers(0, 2**16))
def test_states_round_trip_bf16(rows, dim, seed):
    values = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed)) * 100
    states = decode_states(encode_states("r", values))
    assert states.request_id == "r" and states.tensor.dtype == torch.bfloat16
    assert torch.equal(states.tensor, values.to(torch.bfloat16))  # bf16 on the wire: exact for bf16 values


def test_payload_that_does_not_match_its_header_is_refused():
    payload = encode_states("r", torch.ones(4, 8))
    with pytest.raises(PayloadError, match="62 bytes for shape \\[4, 8\\]") as short:
        decode_states(payload[:-2])
    assert short.value.request_id == "r"
    header, data = payload.split(b"\n", 1)
    as_float = json.dumps({**json.loads(header), "dtype": "float32"}).encode() + b"\n" + data
    with pytest.raises(PayloadError, match="float32; the wire dtype is bfloat16"):
        decode_states(as_float)
    with pytest.raises(PayloadError, match="malformed metadata"):
        parse_message("metadata", b'{"request_id": "r"}')


def test_channels_deliver_to_their_instance_and_count(redis_server):
    encode = Broker(redis_server.url, "E", "m")
    decode = Broker(redis_server.url, "P", "m")
    metadata = Metadata("r1", "E", 3, (3, 4), "bfloat16")
    encode.send_metadata("P", metadata)
    encode.send_states("P", "r1", torch.arange(12.0).reshape(3, 4))
    assert encode.receive(("allocated", "injected"), timeout=0.1) is None  # nothing for E
    channel, payload = decode.receive(("metadata", "states"), timeout=1)
    assert channel == "metadata" and parse_message(channel, payload) == metadata
    channel, payload = decode.receive(("metadata", "states"), timeout=1)
    assert channel == "states" and torch.equal(parse_message(channel, payload).tensor.float(),
                                               torch.arange(12.0).reshape(3, 4))
    decode.send_notice("E", "allocated", Notice("r1", "no room"))
    channel, payload = encode.receive(("allocated", "injected"), timeout=1)
    assert (channel, parse_message(channel, payload)) == ("allocated", Notice("r1", "no room"))
    assert encode.transfers["states", "sent"] == 1 and decode.transfers["states", "received"] == 1
    assert encode.transfer_bytes["states", "sent"] == decode.transfer_bytes["states", "received"] > 24
