"""Property tests of ``__cuda_array_interface__`` dicts from outside, the
binding's parser of them (python/src/dlpack.cpp reads the entries, the core
checks them: read_cuda_array_interface, fuzzed by fuzz/tensor_reader, and
wrap_device checks the memory they describe).  Hypothesis draws every entry
from well-formed and malformed values: other types, ints past 64 bits,
pointers around and far past the producer's allocation, shapes and strides
that step outside it.  Each dict either gives a view of exactly the bytes it
describes (through from_device, one-dimensional integer ones hold the values
NumPy reads there) or is refused with a ValueError, a TypeError or a
CudaError (an address the driver does not know); nothing crashes, and the
producer's memory is unchanged and usable after every case.  The stream entry is left
to None, 1 and 2: a stream handle cannot be checked (the protocol hands over
a raw CUstream)."""

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from conftest import CAIProducer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cuarrow import cuda  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

SIZE = 256
PATTERN = bytes(range(SIZE))  # the producer's memory
ABSENT = object()  # the entry is left out of the dict

junk = st.one_of(
    st.none(),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(st.integers(-5, 5), max_size=2),
    st.booleans(),
)
huge = st.integers(-(2**70), 2**70)
offsets = st.integers(-64, SIZE + 64)  # a pointer near the allocation: data + offset
typestrs = st.sampled_from(["<i4", "|u1", "|i1", "<u2", "<f8", "<i8", "<c16", ">i4", "|b1", "<f2"]) | st.sampled_from(
    ["", "<i3", "<i4x", "i4", "<U4", "<q4", "|V8", "<M8"]
)
dims = st.integers(0, 70) | st.integers(-2, 2) | huge
shapes = st.lists(dims, min_size=1, max_size=1).map(tuple) | st.lists(dims, max_size=3).map(tuple)
long_shapes = st.lists(st.integers(0, 3), min_size=60, max_size=70).map(tuple)
strides = st.lists(st.integers(-64, 64) | huge, max_size=3).map(tuple)


def _weighted(*choices):
    """One of `choices` ((weight, strategy) pairs), by weight."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def _entry(strategy, absent=True):
    """Mostly well-formed (8 in 10), sometimes of another type or absent:
    the cases reach the core's checks and the memory, not only the first
    entry's type check."""
    return _weighted((8, strategy), (1, junk), (1 if absent else 0, st.just(ABSENT)))


@st.composite
def cai_dicts(draw):
    d = {}
    pointer = draw(
        _weighted(
            (12, offsets.map(lambda k: ("base", k))),
            (1, st.just(("raw", 0))),
            (1, huge.map(lambda v: ("raw", v))),
            (1, st.integers(0, 2**64 - 1).map(lambda v: ("raw", v))),
            (1, junk.map(lambda v: ("raw", v))),
        )
    )
    read_only = draw(st.booleans() | junk)
    d["data"] = draw(_weighted((8, st.just("pair")), (1, st.just("junk")), (1, st.just("short"))))
    d["pointer"], d["read_only"] = pointer, read_only
    for key, strategy, absent in (
        ("shape", _weighted((8, shapes), (1, long_shapes)), False),
        ("typestr", typestrs, False),
        ("strides", st.none() | strides, True),
        ("version", st.sampled_from([2, 3, 3, 3, 0, 1, 4, 99, -1, 2**64]), True),
        ("mask", st.none(), True),  # a mask itself: test_adversarial
        ("stream", st.sampled_from([None, 1, 2]), True),
    ):
        value = draw(_entry(strategy, absent))
        if value is not ABSENT:
            d[key] = value
    return d


def _materialize(spec, base):
    desc = {k: v for k, v in spec.items() if k not in ("data", "pointer", "read_only")}
    kind, value = spec["pointer"]
    pointer = base.address + value if kind == "base" else value
    if spec["data"] == "pair":
        desc["data"] = (pointer, spec["read_only"])
    elif spec["data"] == "short":
        desc["data"] = (pointer,)
    else:
        desc["data"] = spec["read_only"]
    return desc


def _described_span(desc, base):
    """(start, size) of the bytes a well-formed, contiguous dict over `base`
    describes, or None when the model does not say (other cases)."""
    data, shape, typestr = desc.get("data"), desc.get("shape"), desc.get("typestr")
    if not (isinstance(data, tuple) and len(data) == 2 and type(data[0]) is int):
        return None
    if not (isinstance(shape, tuple) and all(type(n) is int and 0 <= n < 2**20 for n in shape)):
        return None
    if desc.get("strides") is not None or desc.get("mask", None) is not None:
        return None
    try:
        itemsize = np.dtype(typestr).itemsize
    except (TypeError, ValueError):
        return None
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return data[0], count * itemsize


@pytest.fixture(scope="module")
def base():
    ctx = cuda.Context(0)
    buf = ctx.new_buffer(SIZE)
    buf.copy_from_host(PATTERN)
    return ctx, buf


INTS = ("<i4", "|u1", "|i1", "<u2", "<i8")  # typestrs whose values the model reads back


def _take(take, desc, buf, errors):
    """What `take` makes of a producer exposing `desc` over `buf`, or None
    when it refuses it with one of `errors`."""
    try:
        return take(CAIProducer(desc, keep=buf))
    except errors:
        return None


def _inside(span, buf):
    return span is not None and buf.address <= span[0] and span[0] + span[1] <= buf.address + SIZE


@SETTINGS
@given(spec=cai_dicts())
def test_a_cuda_array_interface_dict_gives_the_bytes_it_describes_or_a_typed_error(base, spec):
    ctx, buf = base
    desc = _materialize(spec, buf)
    view = _take(ctx.buffer_from_object, desc, buf, (ValueError, TypeError, cuda.CudaError))
    if view is not None:
        span = _described_span(desc, buf)
        if span is not None and span[1] > 0:
            assert (view.address, view.size) == span, desc
        if view.size > 0 and _inside((view.address, view.size), buf):
            at = view.address - buf.address
            assert view.copy_to_host().to_pybytes() == PATTERN[at : at + view.size]
    assert buf.copy_to_host().to_pybytes() == PATTERN, "the producer's memory is untouched"


@SETTINGS
@given(spec=cai_dicts())
def test_from_device_takes_a_cuda_array_interface_dict_or_gives_a_typed_error(base, spec):
    ctx, buf = base
    desc = _materialize(spec, buf)
    arr = _take(cuda.from_device, desc, buf, (ValueError, TypeError, NotImplementedError, cuda.CudaError))
    if arr is not None:
        span = _described_span(desc, buf)
        if _inside(span, buf):
            host = arr.to_host()  # a typed array over memory the producer has: readable
            if len(desc["shape"]) == 1 and desc["typestr"] in INTS:
                at = span[0] - buf.address
                want = np.frombuffer(PATTERN[at : at + span[1]], dtype=desc["typestr"])
                assert host.to_numpy(zero_copy_only=False).tolist() == want.tolist(), desc
    assert buf.copy_to_host().to_pybytes() == PATTERN, "the producer's memory is untouched"
