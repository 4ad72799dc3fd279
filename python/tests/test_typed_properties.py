"""Property-based round trips of typed data: hypothesis draws the schema
(nested types several levels deep, unions, run-end encoded, dictionaries,
extension types), the length, the null density, the slice and the seed of
the data; every case must come back equal through to_device / to_host and
through the C Device Data Interface (from_device).  Sizes and examples are
bounded to keep the suite fast."""

import numpy as np
import pyarrow as pa
from arrow_samples import arrow_types, random_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuarrow import cuda

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))

lengths = st.integers(0, 40)
seeds = st.integers(0, 2**32 - 1)
null_densities = st.sampled_from([0.0, 0.1, 0.5, 1.0])


def _slice(a, start, size):
    start = min(start, len(a))
    return a.slice(start, size)


@SETTINGS
@given(t=arrow_types, n=lengths, seed=seeds, null_p=null_densities, start=st.integers(0, 12), size=st.integers(0, 40))
def test_array_roundtrip(t, n, seed, null_p, start, size):
    x = _slice(random_array(t, n, np.random.default_rng(seed), null_p), start, size)
    d = cuda.to_device(x)
    assert d.type == x.type and len(d) == len(x) and d.null_count == x.null_count
    back = d.to_host()
    back.validate(full=True)
    assert back.equals(x)
    assert cuda.from_device(d).to_host().equals(x)
    # slicing on the device is slicing on the host
    assert d.slice(1, 5).to_host().equals(x.slice(1, 5))


@SETTINGS
@given(
    types=st.lists(arrow_types, min_size=1, max_size=4),
    sizes=st.lists(st.integers(0, 15), min_size=0, max_size=3),
    seed=seeds,
    null_p=null_densities,
)
def test_table_roundtrip(types, sizes, seed, null_p):
    rng = np.random.default_rng(seed)
    schema = pa.schema([pa.field(f"f{i}", t) for i, t in enumerate(types)], metadata={"seed": str(seed)})
    batches = [
        pa.RecordBatch.from_arrays([random_array(t, n, rng, null_p) for t in types], schema=schema) for n in sizes
    ]
    table = pa.Table.from_batches(batches, schema=schema)
    d = cuda.to_device(table)
    assert d.schema.equals(schema, check_metadata=True)
    assert d.to_host().equals(table)
    assert cuda.from_device(d).to_host().equals(table)
    for batch in batches:
        b = cuda.to_device(batch)
        assert b.to_host().equals(batch)
        assert cuda.from_device(b).to_host().equals(batch)
    column = pa.chunked_array([b.column(0) for b in batches], type=types[0])
    c = cuda.to_device(column)
    assert c.to_host().equals(column) and c.null_count == column.null_count


PRIMITIVES = [pa.int8(), pa.uint16(), pa.int32(), pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.date32()]


@SETTINGS
@given(t=st.sampled_from(PRIMITIVES), n=st.integers(0, 60), start=st.integers(0, 30), seed=seeds)
def test_tensor_view_points_at_the_first_element(t, n, start, seed):
    x = random_array(t, n, np.random.default_rng(seed), 0.0)
    d = cuda.to_device(x).slice(start)
    width = t.bit_width // 8
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (len(d),)
    if len(d):
        assert cai["data"][0] == d.buffers()[1].address + width * d.offset
        # the bytes the view starts at are those of the slice's first element
        first = d.buffers()[1].copy_to_host(position=width * d.offset, nbytes=width).to_pybytes()
        xs = x.slice(start)
        expected = xs.buffers()[1].to_pybytes()[width * xs.offset : width * (xs.offset + 1)]
        assert first == expected
