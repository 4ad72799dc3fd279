"""Arrow data of every type pyarrow can build, for the typed-array tests:
a catalogue of types (nested several levels deep), a seeded generator of
random arrays of any of them (with nulls where the type has a validity
bitmap), and hypothesis strategies for types."""

from __future__ import annotations

import decimal
import string

import numpy as np
import pyarrow as pa

try:
    import hypothesis.strategies as st
except ImportError:  # pragma: no cover - the suite needs hypothesis
    st = None


# ---- a registered extension type (storage int32: it has a tensor view) --------------


class LabelType(pa.ExtensionType):
    """cuarrow_test.label: int32 codes with a name in the metadata."""

    def __init__(self, name: str = "colour"):
        self._name = name
        super().__init__(pa.int32(), "cuarrow_test.label")

    def __arrow_ext_serialize__(self):
        return self._name.encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls(serialized.decode())


try:
    pa.register_extension_type(LabelType())
except pa.ArrowKeyError:  # already registered (module imported twice)
    pass


def _uuid_type():
    return pa.uuid() if hasattr(pa, "uuid") else None


# ---- the catalogue ----------------------------------------------------------------


def primitive_types():
    types = [
        pa.null(),
        pa.bool_(),
        pa.int8(), pa.int16(), pa.int32(), pa.int64(),
        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
        pa.float16(), pa.float32(), pa.float64(),
        pa.decimal128(10, 2), pa.decimal128(38, 10), pa.decimal256(40, 5), pa.decimal256(76, 0),
        pa.date32(), pa.date64(),
        pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns"),
        pa.timestamp("s"), pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("ns"),
        pa.duration("s"), pa.duration("ms"), pa.duration("us"), pa.duration("ns"),
        pa.month_day_nano_interval(),
        pa.binary(7), pa.binary(1),
        pa.binary(), pa.large_binary(), pa.string(), pa.large_string(),
    ]  # fmt: skip
    if hasattr(pa, "decimal32"):
        types += [pa.decimal32(7, 3), pa.decimal64(18, 4)]
    if hasattr(pa, "string_view"):
        types += [pa.binary_view(), pa.string_view()]
    return types


def nested_types():
    item = pa.int32()
    types = [
        pa.list_(item),
        pa.large_list(pa.string()),
        pa.list_(pa.field("element", pa.float64(), nullable=False)),
        pa.list_(item, 3),
        pa.list_(pa.bool_(), 2),
        pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.bool_())]),
        pa.struct([]),
        pa.map_(pa.string(), pa.int32()),
        pa.map_(pa.int64(), pa.list_(pa.string()), keys_sorted=True),
        pa.sparse_union([pa.field("i", pa.int32()), pa.field("s", pa.string())]),
        pa.dense_union([pa.field("i", pa.int64()), pa.field("f", pa.float32()), pa.field("b", pa.binary())]),
        pa.sparse_union([pa.field("x", pa.int8()), pa.field("y", pa.large_string())], type_codes=[5, 42]),
        pa.dense_union([pa.field("x", pa.int8()), pa.field("y", pa.list_(pa.int16()))], type_codes=[7, 3]),
        pa.run_end_encoded(pa.int32(), pa.string()),
        pa.run_end_encoded(pa.int16(), pa.float64()),
        pa.run_end_encoded(pa.int64(), pa.list_(pa.int8())),
        pa.dictionary(pa.int32(), pa.string()),
        pa.dictionary(pa.int8(), pa.int64(), ordered=True),
        pa.dictionary(pa.uint16(), pa.large_binary()),
        LabelType("size"),
        # several levels deep
        pa.list_(pa.struct([("k", pa.string()), ("v", pa.list_(pa.int64()))])),
        pa.struct([("m", pa.map_(pa.string(), pa.struct([("x", pa.float32()), ("y", pa.list_(item, 2))])))]),
        pa.large_list(pa.dense_union([pa.field("l", pa.list_(pa.string())), pa.field("d", pa.decimal128(12, 3))])),
        pa.struct(
            [("ree", pa.run_end_encoded(pa.int32(), pa.int64())), ("dict", pa.dictionary(pa.int16(), pa.string()))]
        ),
        pa.list_(pa.list_(pa.list_(pa.timestamp("us", tz="UTC")))),
        pa.struct([("label", LabelType("kind")), ("inner", pa.struct([("fsb", pa.binary(3))]))]),
    ]  # fmt: skip
    if hasattr(pa, "list_view"):
        types += [
            pa.list_view(pa.int16()),
            pa.large_list_view(pa.string()),
            pa.list_view(pa.struct([("a", pa.list_view(pa.int8()))])),
        ]
    if hasattr(pa, "string_view"):
        types += [pa.list_(pa.string_view()), pa.struct([("bv", pa.binary_view())])]
    uuid = _uuid_type()
    if uuid is not None:
        types += [uuid, pa.list_(uuid)]
    return types


def all_types():
    return primitive_types() + nested_types()


def type_id(t) -> str:
    return str(t).replace(" ", "")


# ---- random arrays ------------------------------------------------------------------------


def _has_validity(t: pa.DataType) -> bool:
    return not (pa.types.is_null(t) or pa.types.is_union(t) or pa.types.is_run_end_encoded(t))


def _mask(rng, n, null_p):
    if null_p <= 0 or n == 0:
        return None
    return rng.random(n) < null_p


def _maybe_none(values, mask):
    if mask is None:
        return list(values)
    return [None if m else v for v, m in zip(values, mask)]


def _pa_mask(mask):
    return None if mask is None else pa.array(mask, pa.bool_())


_TIME_RANGE = {"s": 86400, "ms": 86400 * 1000, "us": 86400 * 10**6, "ns": 86400 * 10**9}


def _text(rng, max_len, alphabet=string.ascii_letters + string.digits + "éß漢 "):
    size = int(rng.integers(0, max_len + 1))
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size))


def random_array(t: pa.DataType, n: int, rng, null_p: float = 0.2) -> pa.Array:
    """A random array of type `t` and length `n`; about `null_p` of its
    slots are null where the type has a validity bitmap (children too)."""
    mask = _mask(rng, n, null_p) if _has_validity(t) else None

    if isinstance(t, pa.BaseExtensionType):
        storage = random_array(t.storage_type, n, rng, null_p)
        return pa.ExtensionArray.from_storage(t, storage)
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_boolean(t):
        return pa.array(rng.random(n) < 0.5, type=t, mask=mask)
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        values = rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)
        return pa.array(values, type=t, mask=mask)
    if pa.types.is_floating(t):
        values = rng.standard_normal(n) * 100
        if t == pa.float16():
            return pa.array(values.astype(np.float16), type=t, mask=mask)
        return pa.array(values.astype(t.to_pandas_dtype()), type=t, mask=mask)
    if pa.types.is_decimal(t):
        digits = min(t.precision, 18)
        ints = rng.integers(-(10**digits) + 1, 10**digits, n)
        values = [decimal.Decimal(int(v)).scaleb(-t.scale) for v in ints]
        return pa.array(_maybe_none(values, mask), type=t)
    if pa.types.is_date32(t):
        return pa.array(rng.integers(-20000, 40000, n).astype(np.int32), pa.int32(), mask=mask).view(t)
    if pa.types.is_date64(t):
        days = rng.integers(-20000, 40000, n).astype(np.int64)
        return pa.array(days * 86400000, pa.int64(), mask=mask).view(t)
    if pa.types.is_time(t):
        values = rng.integers(0, _TIME_RANGE[t.unit], n)
        storage = pa.int32() if pa.types.is_time32(t) else pa.int64()
        return pa.array(values.astype(storage.to_pandas_dtype()), storage, mask=mask).view(t)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        values = rng.integers(-(2**40), 2**40, n).astype(np.int64)
        return pa.array(values, pa.int64(), mask=mask).view(t)
    if t == pa.month_day_nano_interval():
        months = rng.integers(-100, 100, n)
        days = rng.integers(-100, 100, n)
        nanos = rng.integers(-(2**40), 2**40, n)
        values = [(int(m), int(d), int(ns)) for m, d, ns in zip(months, days, nanos)]
        return pa.array(_maybe_none(values, mask), type=t)
    if pa.types.is_fixed_size_binary(t):
        values = [bytes(rng.integers(0, 256, t.byte_width, dtype=np.uint8)) for _ in range(n)]
        return pa.array(_maybe_none(values, mask), type=t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or _is_binary_view(t):
        values = [bytes(rng.integers(0, 256, int(rng.integers(0, 24)), dtype=np.uint8)) for _ in range(n)]
        return pa.array(_maybe_none(values, mask), type=t)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        values = [_text(rng, 20) for _ in range(n)]
        return pa.array(_maybe_none(values, mask), type=t)
    if pa.types.is_fixed_size_list(t):
        child = random_array(t.value_type, n * t.list_size, rng, null_p if t.value_field.nullable else 0)
        return pa.FixedSizeListArray.from_arrays(child, type=t, mask=_pa_mask(mask))
    if pa.types.is_map(t):
        sizes = rng.integers(0, 4, n)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        total = int(offsets[-1])
        keys = random_array(t.key_type, total, rng, 0)
        items = random_array(t.item_type, total, rng, null_p if t.item_field.nullable else 0)
        return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type=t, mask=_pa_mask(mask))
    if _is_list_like(t):
        sizes = rng.integers(0, 4, n)
        total = int(sizes.sum())
        child = random_array(t.value_type, total, rng, null_p if t.value_field.nullable else 0)
        large = pa.types.is_large_list(t) or _is_large_list_view(t)
        offset_type = np.int64 if large else np.int32
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(offset_type)
            cls = pa.LargeListArray if large else pa.ListArray
            return cls.from_arrays(pa.array(offsets), child, type=t, mask=_pa_mask(mask))
        # list views: the segments laid out in a shuffled order
        order = rng.permutation(n)
        starts = np.zeros(n, dtype=np.int64)
        position = 0
        for i in order:
            starts[i] = position
            position += sizes[i]
        cls = pa.LargeListViewArray if large else pa.ListViewArray
        return cls.from_arrays(
            pa.array(starts.astype(offset_type)),
            pa.array(sizes.astype(offset_type)),
            child,
            type=t,
            mask=_pa_mask(mask),
        )
    if pa.types.is_struct(t):
        children = [random_array(f.type, n, rng, null_p if f.nullable else 0) for f in t]
        if not children:
            return pa.array([{}] * n if mask is None else _maybe_none([{}] * n, mask), type=t)
        return pa.StructArray.from_arrays(children, fields=list(t), mask=_pa_mask(mask))
    if pa.types.is_union(t):
        codes = list(t.type_codes)
        fields = [t.field(i) for i in range(t.num_fields)]
        choice = rng.integers(0, len(codes), n)
        types = pa.array(np.array([codes[c] for c in choice], dtype=np.int8), pa.int8())
        names = [f.name for f in fields]
        if t.mode == "sparse":
            children = [random_array(f.type, n, rng, null_p) for f in fields]
            return pa.UnionArray.from_sparse(types, children, names, codes)
        counts = [int((choice == i).sum()) for i in range(len(codes))]
        children = [random_array(f.type, c, rng, null_p) for f, c in zip(fields, counts)]
        seen = [0] * len(codes)
        offsets = []
        for c in choice:
            offsets.append(seen[c])
            seen[c] += 1
        return pa.UnionArray.from_dense(types, pa.array(offsets, pa.int32()), children, names, codes)
    if pa.types.is_run_end_encoded(t):
        if n == 0:
            return pa.RunEndEncodedArray.from_arrays(
                pa.array([], t.run_end_type), random_array(t.value_type, 0, rng), type=t
            )
        runs = int(rng.integers(1, n + 1))
        cuts = np.sort(rng.choice(np.arange(1, n), size=runs - 1, replace=False)) if runs > 1 else np.array([], int)
        run_ends = np.concatenate([cuts, [n]]).astype(t.run_end_type.to_pandas_dtype())
        values = random_array(t.value_type, runs, rng, null_p)
        return pa.RunEndEncodedArray.from_arrays(pa.array(run_ends, t.run_end_type), values, type=t)
    if pa.types.is_dictionary(t):
        size = int(rng.integers(1, 6))
        dictionary = random_array(t.value_type, size, rng, 0)
        indices = pa.array(rng.integers(0, size, n).astype(t.index_type.to_pandas_dtype()), t.index_type, mask=mask)
        return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=t.ordered)
    raise NotImplementedError(f"no generator for {t}")


def _is_binary_view(t) -> bool:
    return hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t)


def _is_string_view(t) -> bool:
    return hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t)


def _is_large_list_view(t) -> bool:
    return hasattr(pa.types, "is_large_list_view") and pa.types.is_large_list_view(t)


def _is_list_like(t) -> bool:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return True
    return hasattr(pa.types, "is_list_view") and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t))


def sample(t: pa.DataType, n: int = 23, seed: int = 0, null_p: float = 0.2) -> pa.Array:
    arr = random_array(t, n, np.random.default_rng(seed), null_p)
    arr.validate(full=True)
    return arr


# ---- hypothesis strategies ---------------------------------------------------------------

if st is not None:
    _leaf_types = st.sampled_from([t for t in primitive_types() if not pa.types.is_null(t)] + [pa.null(), LabelType()])
    _names = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
    _key_types = st.sampled_from([pa.int32(), pa.int64(), pa.string(), pa.large_string()])

    def _nest(children):
        fields = st.builds(
            lambda name, t, nullable: pa.field(name, t, nullable=nullable or pa.types.is_null(t)),
            _names, children, st.booleans(),
        )  # fmt: skip
        unique_fields = st.lists(fields, min_size=1, max_size=3, unique_by=lambda f: f.name)
        # pyarrow builds union children as nullable fields
        union_fields = st.lists(
            st.builds(pa.field, _names, children), min_size=1, max_size=3, unique_by=lambda f: f.name
        )
        options = [
            st.builds(pa.list_, children),
            st.builds(pa.large_list, children),
            st.builds(lambda t, k: pa.list_(t, k), children, st.integers(1, 3)),
            st.builds(pa.struct, unique_fields),
            st.builds(lambda k, v: pa.map_(k, v), _key_types, children),
            st.builds(lambda fs: pa.sparse_union(fs), union_fields),
            st.builds(lambda fs: pa.dense_union(fs), union_fields),
            st.builds(
                lambda r, v: pa.run_end_encoded(r, v),
                st.sampled_from([pa.int16(), pa.int32(), pa.int64()]),
                children.filter(lambda t: not pa.types.is_run_end_encoded(t)),
            ),
            st.builds(
                lambda i, v: pa.dictionary(i, v),
                st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.uint32(), pa.int64()]),
                st.sampled_from([pa.string(), pa.int64(), pa.binary(), pa.float32(), pa.large_string()]),
            ),
        ]
        if hasattr(pa, "list_view"):
            options += [st.builds(pa.list_view, children), st.builds(pa.large_list_view, children)]
        return st.one_of(options)

    arrow_types = st.recursive(_leaf_types, _nest, max_leaves=6)
