"""Argument ranges are checked once, in the core (cuarrow::ranges), with
pyarrow.cuda's messages and exception class: a plain ValueError, as
pyarrow.cuda raises (not pyarrow.ArrowInvalid, its subclass)."""

import pytest


def _raises_value_error(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert type(info.value) is ValueError, type(info.value)


def test_range_errors_are_plain_value_errors(ctx):
    buf = ctx.buffer_from_data(b"0123456789")
    host = bytearray(4)
    _raises_value_error(lambda: buf.copy_to_host(position=11), "position argument is out-of-range")
    _raises_value_error(lambda: buf.copy_to_host(position=4, nbytes=7), "requested more to copy than available from")
    _raises_value_error(lambda: buf.copy_to_host(nbytes=5, buf=host), "requested copy does not fit into host buffer")
    _raises_value_error(lambda: buf.copy_to_host(nbytes=-2), r"nbytes argument must be non-negative \(or -1")
    _raises_value_error(lambda: buf.copy_from_host(b"abcde", position=8, nbytes=5), "available in device buffer")
    _raises_value_error(lambda: buf.copy_from_host(b"ab", nbytes=3), "available from host buffer")
    _raises_value_error(lambda: buf.copy_from_device(buf, position=11), "position argument is out-of-range")
    _raises_value_error(lambda: ctx.buffer_from_data(b"abc", offset=3), "offset argument is out-of-range")
    _raises_value_error(lambda: ctx.buffer_from_data(b"abc", size=4), "requested larger slice than available")
    _raises_value_error(lambda: buf.slice(10), "offset argument is out-of-range")
    _raises_value_error(lambda: buf.slice(0, -1), "length argument must be non-negative, got -1")


@pytest.mark.parametrize("huge", [1 << 64, -(1 << 64)])
def test_positions_past_64_bits_are_out_of_range(ctx, huge):
    buf = ctx.buffer_from_data(b"0123456789")
    _raises_value_error(lambda: buf.copy_to_host(position=huge), "position argument is out-of-range")
    _raises_value_error(lambda: buf.copy_from_host(b"ab", position=huge), "position argument is out-of-range")
    _raises_value_error(lambda: buf.slice(huge), "offset argument is out-of-range")
    _raises_value_error(lambda: ctx.buffer_from_data(b"abc", offset=huge), "offset argument is out-of-range")
    with pytest.raises(ValueError):
        buf.copy_to_host(nbytes=huge)
