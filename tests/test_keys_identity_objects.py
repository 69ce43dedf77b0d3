"""Objects the allowlist keeps by identity (`eqxstable/_keys/README.md`: `K-weakref`,
`K-library-container`, `K-buffer`, `K-opaque`): weak references and weak containers, buffers,
`mmap` and ctypes pointers, C objects with hidden state. Never substituted; what they hold or
point to is watched where it can be read."""

import array
import ctypes
import itertools
import mmap
import threading
import weakref

import pytest

import eqxstable as es

from .keys_support import key


def test_weak_references_are_identity_never_substituted():
    class Target:
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return True

        def __hash__(self):
            return 0

        def method(self):
            return self.v

    a, b = Target(1), Target(2)
    ra, rb = weakref.ref(a), weakref.ref(b)
    assert key(ra) != key(rb)
    assert es.intern(ra) is ra and es.intern(rb) is rb
    ma, mb = weakref.WeakMethod(a.method), weakref.WeakMethod(b.method)
    assert es.intern(ma) is ma and es.intern(mb) is mb and key(ma) != key(mb)
    pa = weakref.proxy(a)
    assert key(pa) != key(pa)  # Nothing to name: a key equal to nothing.
    # Through a closure: a referent changed in place is seen.
    f = (lambda r: lambda x: x * r().v)(ra)  # pyright: ignore[reportOptionalMemberAccess]
    before = key(f)
    a.v = 5
    assert key(f) != before


def test_weak_containers_identity_and_items_watched():
    class Box:
        def __init__(self, v):
            self.v = v

    box = Box(1.0)
    d = weakref.WeakValueDictionary({"w": box})
    e = weakref.WeakValueDictionary({"w": box})
    assert key(d) != key(e) and es.intern(e) is e
    f = (lambda d: lambda x: x * d["w"].v)(d)
    before = key(f)
    box.v = 2.0
    assert key(f) != before
    before = key(f)
    other = Box(3.0)
    d["v"] = other
    assert key(f) != before


@pytest.mark.parametrize(
    "make, change",
    [
        (lambda: memoryview(bytearray(b"ab")), lambda m: m.obj.__setitem__(0, 0)),
        (lambda: array.array("d", [1.0]), lambda a: a.__setitem__(0, 2.0)),
        (lambda: ctypes.c_double(1.0), lambda c: setattr(c, "value", 2.0)),
        (lambda: (ctypes.c_int * 2)(1, 2), lambda c: c.__setitem__(0, 5)),
    ],
    ids=["memoryview", "array", "ctypes", "ctypes-array"],
)
def test_buffers_identity_and_bytes_watched(make, change):
    a, b = make(), make()
    assert key(a) != key(b) and es.intern(b) is b
    f = (lambda a: lambda x: (x, a))(a)
    before = key(f)
    assert key(f) == before
    change(a)
    assert key(f) != before


def test_mmap_and_pointers():
    m = mmap.mmap(-1, 4)
    f = (lambda m: lambda x: (x, m))(m)
    before = key(f)
    m[0] = 7
    assert key(f) != before
    m.close()  # Never exported: closing still works.
    p = ctypes.pointer(ctypes.c_int(1))
    assert key(p) != key(p)


def test_c_objects_with_hidden_state_are_identity():
    counter, other = itertools.count(), itertools.count()
    f = (lambda c: lambda x: x + next(c))(counter)
    g = (lambda c: lambda x: x + next(c))(other)
    assert key(counter) == key(counter) and key(counter) != key(other)
    assert key(f) != key(g) and es.intern(other) is other and key(f).identity
    # A C class's instances that hold state are never constants, whether or not the class is a
    # heap type (a lock is one on every Python; `itertools`' classes since Python 3.12).
    lock = threading.Lock()
    assert key(lock).identity and key(itertools.repeat(1)).identity
    assert key((lambda: lambda: lock.locked())()).identity
