"""The Arrow C Data / C Device Data / C Stream structs in ctypes, to read the
capsules cuarrow exports and to hand-make malformed ones."""

import ctypes
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_void_p


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


SchemaRelease = ctypes.CFUNCTYPE(None, POINTER(ArrowSchema))
ArrayRelease = ctypes.CFUNCTYPE(None, POINTER(ArrowArray))

ArrowSchema._fields_ = [
    ("format", c_char_p),
    ("name", c_char_p),
    ("metadata", c_char_p),
    ("flags", c_int64),
    ("n_children", c_int64),
    ("children", POINTER(POINTER(ArrowSchema))),
    ("dictionary", POINTER(ArrowSchema)),
    ("release", SchemaRelease),
    ("private_data", c_void_p),
]
ArrowArray._fields_ = [
    ("length", c_int64),
    ("null_count", c_int64),
    ("offset", c_int64),
    ("n_buffers", c_int64),
    ("n_children", c_int64),
    ("buffers", POINTER(c_void_p)),
    ("children", POINTER(POINTER(ArrowArray))),
    ("dictionary", POINTER(ArrowArray)),
    ("release", ArrayRelease),
    ("private_data", c_void_p),
]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [
        ("array", ArrowArray),
        ("device_id", c_int64),
        ("device_type", c_int32),
        ("sync_event", c_void_p),
        ("reserved", c_int64 * 3),
    ]


class ArrowDeviceArrayStream(ctypes.Structure):
    pass


class ArrowArrayStream(ctypes.Structure):
    pass


DeviceGetSchema = ctypes.CFUNCTYPE(ctypes.c_int, POINTER(ArrowDeviceArrayStream), POINTER(ArrowSchema))
DeviceGetNext = ctypes.CFUNCTYPE(ctypes.c_int, POINTER(ArrowDeviceArrayStream), POINTER(ArrowDeviceArray))
DeviceGetLastError = ctypes.CFUNCTYPE(c_char_p, POINTER(ArrowDeviceArrayStream))
DeviceStreamRelease = ctypes.CFUNCTYPE(None, POINTER(ArrowDeviceArrayStream))
ArrowDeviceArrayStream._fields_ = [
    ("device_type", c_int32),
    ("get_schema", DeviceGetSchema),
    ("get_next", DeviceGetNext),
    ("get_last_error", DeviceGetLastError),
    ("release", DeviceStreamRelease),
    ("private_data", c_void_p),
]

GetSchema = ctypes.CFUNCTYPE(ctypes.c_int, POINTER(ArrowArrayStream), POINTER(ArrowSchema))
GetNext = ctypes.CFUNCTYPE(ctypes.c_int, POINTER(ArrowArrayStream), POINTER(ArrowArray))
GetLastError = ctypes.CFUNCTYPE(c_char_p, POINTER(ArrowArrayStream))
StreamRelease = ctypes.CFUNCTYPE(None, POINTER(ArrowArrayStream))
ArrowArrayStream._fields_ = [
    ("get_schema", GetSchema),
    ("get_next", GetNext),
    ("get_last_error", GetLastError),
    ("release", StreamRelease),
    ("private_data", c_void_p),
]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_char_p, c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def capsule_name(capsule) -> str:
    return _capsule_name(capsule).decode()


def read_struct(capsule, struct_type):
    """The struct a capsule points to (a view: valid while the capsule lives)."""
    address = _capsule_pointer(capsule, _capsule_name(capsule))
    return struct_type.from_address(address)


class Keeper:
    """Keeps hand-made structs (and everything they point to) alive, and
    counts the release calls."""

    def __init__(self):
        self.objects = []
        self.releases = 0

    def keep(self, *objs):
        self.objects.extend(objs)
        return objs[0]

    def capsule(self, struct, name: str):
        name_bytes = name.encode()
        self.keep(struct, name_bytes)
        return _capsule_new(ctypes.addressof(struct), name_bytes, None)

    def schema(self, fmt: str, children=(), flags=2):
        s = ArrowSchema()
        s.format = self.keep(fmt.encode())
        s.name = self.keep(b"")
        s.flags = flags
        s.n_children = len(children)
        if children:
            arr = (POINTER(ArrowSchema) * len(children))(*[ctypes.pointer(c) for c in children])
            s.children = ctypes.cast(self.keep(arr), POINTER(POINTER(ArrowSchema)))
        s.release = self.keep(SchemaRelease(self._release_schema))
        return self.keep(s)

    def array(self, length, buffers, null_count=0, offset=0, n_buffers=None, children=()):
        a = ArrowArray()
        a.length = length
        a.null_count = null_count
        a.offset = offset
        a.n_buffers = len(buffers) if n_buffers is None else n_buffers
        pointers = (c_void_p * max(len(buffers), 1))(*buffers)
        a.buffers = ctypes.cast(self.keep(pointers), POINTER(c_void_p))
        a.n_children = len(children)
        if children:
            arr = (POINTER(ArrowArray) * len(children))(*[ctypes.pointer(c) for c in children])
            a.children = ctypes.cast(self.keep(arr), POINTER(POINTER(ArrowArray)))
        a.release = self.keep(ArrayRelease(self._release_array))
        return self.keep(a)

    def device_array(self, array, device_type, device_id=0):
        d = ArrowDeviceArray()
        d.array = array
        d.device_type = device_type
        d.device_id = device_id
        return self.keep(d)

    def _release_schema(self, p):
        self.releases += 1
        p.contents.release = SchemaRelease()

    def _release_array(self, p):
        self.releases += 1
        p.contents.release = ArrayRelease()
