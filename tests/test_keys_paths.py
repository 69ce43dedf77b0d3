"""Paths (`K-path`): a concrete path (`PosixPath`, `WindowsPath`) reached by anything is a key
equal to nothing, however it is held, since its methods read the file system, which no key sees;
on its own (a static argument that is the path itself) it is its text, as Equinox compares it by
`==`; a pure path is its text wherever it is.

Differential: freshly rebuilt functions reading a file through a path placed every way a
function can hold it, under `es.filter_jit`, `equinox.filter_jit` and eager Python, with the file
rewritten between the builds or not. A wrong answer fails; a retrace does not. Where sharing is
claimed, traces are counted."""

import functools as ft
import io
import os
import pathlib
import tempfile
import zipfile
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


_DIR = pathlib.Path(tempfile.mkdtemp())
FILE = _DIR / "scale.txt"
FILE.write_text("1.0")
TEXT = str(FILE)

# Globals holding the very same path object, read by every rebuilt function.
_LIST = [pathlib.Path(TEXT)]
_DICT = {"cfg": pathlib.Path(TEXT)}
_TUPLE = (pathlib.Path(TEXT),)


class _Cfg:
    def __init__(self, path: pathlib.Path):
        self.path = path


_OBJ = _Cfg(pathlib.Path(TEXT))


def _scale(cfg: pathlib.Path) -> float:
    return float(cfg.read_text())


def _positional(cfg, x):
    return x * _scale(cfg)


def _keyword(x, cfg):
    return x * _scale(cfg)


class _Reader:
    def __init__(self, path: pathlib.Path):
        self.path = path

    def read(self, x):
        return x * _scale(self.path)


class _Holder(eqx.Module):
    fn: Callable = eqx.field(static=True)

    def __call__(self, x):
        return self.fn(x)


class _StableHolder(es.StableModule):
    fn: Callable = eqx.field(static=True)

    def __call__(self, x):
        return self.fn(x)


class _PathField(eqx.Module):
    path: pathlib.Path = eqx.field(static=True)

    def __call__(self, x):
        return x * _scale(self.path)


def _default():
    def f(x, cfg=pathlib.Path(TEXT)):
        return x * _scale(cfg)

    return f


def _kw_default():
    def f(x, *, cfg=pathlib.Path(TEXT)):
        return x * _scale(cfg)

    return f


def _tuple_in_cell():
    t = (pathlib.Path(TEXT),)
    return lambda x: x * _scale(t[0])


def _list_in_global():
    return lambda x: x * _scale(_LIST[0])


def _dict_in_global():
    return lambda x: x * _scale(_DICT["cfg"])


def _tuple_in_global():
    return lambda x: x * _scale(_TUPLE[0])


def _attribute_in_cell():
    cfg = _Cfg(pathlib.Path(TEXT))
    return lambda x: x * _scale(cfg.path)


def _attribute_in_global():
    return lambda x: x * _scale(_OBJ.path)


# Placement -> (a fresh build of the function to jit, whether `equinox.filter_jit` on a fresh
# build sees the file as it is now: not where it compares the path itself by `==`).
PLACEMENTS: dict[str, tuple[Callable[[], Callable], bool]] = {
    "default": (_default, True),
    "kw-only default": (_kw_default, True),
    "partial arg": (lambda: ft.partial(_positional, pathlib.Path(TEXT)), True),
    "partial keyword": (lambda: ft.partial(_keyword, cfg=pathlib.Path(TEXT)), True),
    "tuple in cell": (_tuple_in_cell, True),
    "list in global": (_list_in_global, True),
    "dict in global": (_dict_in_global, True),
    "tuple in global": (_tuple_in_global, True),
    "object attribute (cell)": (_attribute_in_cell, True),
    "object attribute (global)": (_attribute_in_global, True),
    "bound method": (lambda: _Reader(pathlib.Path(TEXT)).read, True),
    "module static field (callable)": (lambda: _Holder(_default()), True),
    "StableModule static field (callable)": (lambda: _StableHolder(_default()), True),
    # Equinox compares a static field by `==`: it shares, and reads the old file.
    "module static field (path)": (lambda: _PathField(pathlib.Path(TEXT)), False),
}


@settings(max_examples=40)
@given(
    placement=st.sampled_from(sorted(PLACEMENTS)),
    first=st.integers(1, 9),
    second=st.integers(1, 9),
    rewrite=st.booleans(),
)
def test_a_rebuilt_reader_of_a_path_computes_from_the_file_as_it_is(
    placement, first, second, rewrite
):
    build, equinox_sound = PLACEMENTS[placement]
    x = jnp.float32(2.0)
    FILE.write_text(f"{first}.0")
    assert float(es.filter_jit(build())(x)) == 2.0 * first
    if equinox_sound:
        assert float(eqx.filter_jit(build())(x)) == 2.0 * first
    if rewrite:
        FILE.write_text(f"{second}.0")
    expected = float(build()(x))  # eager Python
    assert expected == 2.0 * (second if rewrite else first)
    assert float(es.filter_jit(build())(x)) == expected
    if equinox_sound:
        assert float(eqx.filter_jit(build())(x)) == expected


def test_paths_by_type_and_text_and_a_concrete_one_reached_is_never_shared():
    """The row test of `K-path` (`tests/test_keys_rows.py`, `ROW_TESTS`)."""
    key = es.stable_key
    # On its own: exact type and text.
    assert key(pathlib.Path("a/b")) == key(pathlib.Path("a") / "b")
    assert key(pathlib.Path("a")) != key(pathlib.PurePosixPath("a"))
    assert not key(pathlib.Path("a")).identity
    # Reached by anything, a concrete path is a key equal to nothing; a pure path its text.
    for make in (pathlib.Path, pathlib.PurePosixPath):
        pure = make is pathlib.PurePosixPath
        same = make("a")
        # (A list or dict is keyed by its identity anyway: `K-mutable`.)
        for holder in (
            lambda p: (p,),
            lambda p: ft.partial(_keyword, cfg=p),
            lambda p: lambda x, cfg=p: x,
        ):
            assert (key(holder(make("a"))) == key(holder(make("a")))) is pure
            # The very same path, held by two rebuilt holders: never shared either.
            assert (key(holder(same)) == key(holder(same))) is pure


def test_a_global_path_read_for_its_text_alone_is_its_text():
    FILE.write_text("1.0")

    def name_reader():
        return lambda x: (x, _LIST[0].name)

    def file_reader():
        return lambda x: x * _scale(_LIST[0])

    assert es.stable_key(name_reader()) != es.stable_key(name_reader())  # a list: identity
    # The path itself as the global, read for `.name`: its text, so rebuilt readers share.
    assert es.stable_key(_names_only()) == es.stable_key(_names_only())
    assert es.stable_key(_reads_global()) != es.stable_key(_reads_global())
    assert es.stable_key(file_reader()) != es.stable_key(file_reader())


PATH = pathlib.Path(TEXT)


def _names_only():
    return lambda x: (x, PATH.name, PATH.suffix)


def _reads_global():
    return lambda x: x * _scale(PATH)


@pytest.mark.counts_traces
def test_pure_path_defaults_share():
    x = jnp.float32(2.0)
    traces = 0

    def pure():
        def f(x, cfg=pathlib.PurePosixPath(TEXT)):
            nonlocal traces
            traces += 1
            return x * len(cfg.suffix)

        return f

    # Two rebuilt functions, one trace.
    assert float(es.filter_jit(pure())(x)) == float(es.filter_jit(pure())(x)) == 8.0
    assert traces == 1


@pytest.mark.counts_traces
def test_a_concrete_path_as_the_static_argument_itself_is_its_text():
    # As `equinox.filter_jit` compares it (by `==`): a new path object with the same text hits.
    x = jnp.float32(2.0)
    FILE.write_text("1.0")
    traces = 0

    def arg(x, p):
        nonlocal traces
        traces += 1
        return x * _scale(p)

    f = es.filter_jit(arg)
    assert float(f(x, pathlib.Path(TEXT))) == float(f(x, pathlib.Path(TEXT))) == 2.0
    assert float(es.filter_jit(arg)(x, pathlib.Path(TEXT))) == 2.0
    assert traces == 1


@pytest.mark.counts_traces
def test_the_same_reader_keeps_its_key():
    # One function object with a default path: one trace, also for a new wrapper of it
    # (`es.filter_jit(g)(x)` written inline), as under `equinox.filter_jit`.
    x = jnp.float32(2.0)
    FILE.write_text("1.0")
    traces = 0

    def make():
        def g(x, cfg=pathlib.Path(TEXT)):
            nonlocal traces
            traces += 1
            return x * _scale(cfg)

        return g

    g = make()
    assert [float(es.filter_jit(g)(x)) for _ in range(3)] == [2.0] * 3
    assert traces == 1
    # The same module holding a path in a static field: one trace; a rebuilt one traces again.
    m = _PathField(pathlib.Path(TEXT))
    h = es.filter_jit(lambda m, x: m(x))
    assert [float(h(m, x)) for _ in range(3)] == [2.0] * 3
    assert h.cache_info().traces == 1
    h(_PathField(pathlib.Path(TEXT)), x)
    assert h.cache_info().traces == 2


def test_intern_of_a_path():
    # Two concrete paths with the same text behave identically (the same methods over the same
    # text, reading the same file system): `intern` may hand one out for the other.
    a = es.intern(pathlib.Path(TEXT))
    assert es.intern(pathlib.Path(TEXT)) is a
    assert es.intern(pathlib.PurePosixPath(TEXT)) is not a
    # What holds a concrete path is keyed as its reader: never substituted.
    t = (pathlib.Path(TEXT),)
    assert es.intern(t) is t and es.intern((pathlib.Path(TEXT),)) is not t
    f = _default()
    assert es.intern(f) is f and es.intern(_default()) is not f


def test_a_path_keyed_first_as_a_value_is_still_a_reader_s_file_system():
    # The memo: a container keyed on its own, then reached by rebuilt readers.
    t = (pathlib.Path(TEXT),)
    es.stable_key(t)

    def reader():
        return lambda x: x * _scale(t[0])

    assert es.stable_key(reader()) != es.stable_key(reader())
    both = (t, reader())
    assert es.stable_key(both) != es.stable_key((t, reader()))


class _MyPath(type(pathlib.Path())):  # pyright: ignore[reportGeneralTypeIssues]
    pass


def _zip_path() -> zipfile.Path:
    name = _DIR / "z.zip"
    with zipfile.ZipFile(name, "w") as z:
        z.writestr("scale.txt", "1.0")
    return zipfile.Path(name, "scale.txt")


def _dir_entry() -> os.DirEntry:
    with os.scandir(_DIR) as entries:
        return next(e for e in entries if e.name == "scale.txt")


# Other objects through which a trace may read a file or a stream: each is keyed by identity or
# as a key equal to nothing when reached, never by a value two readers could share.
OTHERS = {
    "subclass of Path": lambda: _MyPath(TEXT),
    "os.DirEntry": lambda: _dir_entry(),
    "zipfile.Path": _zip_path,
    "importlib.resources": lambda: __import__("importlib.resources").resources.files("json"),
    "open file": lambda: open(TEXT),  # noqa: SIM115
    "io.StringIO": lambda: io.StringIO("1.0"),
    "io.BytesIO": lambda: io.BytesIO(b"1.0"),
}


@pytest.mark.parametrize("kind", sorted(OTHERS))
def test_other_ways_to_the_file_system_are_never_shared(kind):
    same, other = OTHERS[kind](), OTHERS[kind]()

    def reader(obj):
        return lambda x, cfg=obj: x

    try:
        assert es.stable_key(reader(same)) != es.stable_key(reader(same))
        assert es.stable_key(reader(same)) != es.stable_key(reader(other))
    finally:
        for obj in (same, other):
            if isinstance(obj, io.IOBase):
                obj.close()


def _reads_default(cfg=pathlib.Path(TEXT)):
    return _scale(cfg)


def _reads_env():
    # `os.getenv`: a library function reading `os.environ` unseen (`K-impure-library`).
    return float(os.getenv("EQXSTABLE_TEST_SCALE", "0"))


@pytest.mark.parametrize("helper", [_reads_default, _reads_env], ids=["path", "getenv"])
def test_a_reader_keyed_on_its_own_is_another_reader_inside_a_rebuilt_function(helper, monkeypatch):
    # The memo across calls: `helper` keyed once on its own (a static argument, `intern`, a
    # `StableModule` field) keeps its key, but it is never spliced into the key of a rebuilt
    # function calling it, which is another reader of the file or the environment.
    x = jnp.float32(2.0)
    FILE.write_text("1.0")
    monkeypatch.setenv("EQXSTABLE_TEST_SCALE", "1.0")
    assert es.stable_key(helper) == es.stable_key(helper)

    def make():
        return lambda x: x * helper()

    assert float(es.filter_jit(make())(x)) == 2.0
    FILE.write_text("3.0")
    monkeypatch.setenv("EQXSTABLE_TEST_SCALE", "3.0")
    assert float(es.filter_jit(make())(x)) == float(make()(x)) == 6.0
    assert es.stable_key(make()) != es.stable_key(make())


def _memmap_reader():
    # NumPy's readers of a file named by text (`np.lib.format.open_memmap`, defined in
    # `numpy.lib._format_impl`; `np.rec.fromfile`): library functions that read files
    # (`K-impure-library`), never on the allowlist of those computing from their arguments.
    def f(x, name=TEXT):
        return x * np.lib.format.open_memmap(name)[0]

    return f


def _records_reader():
    def f(x, name=TEXT):
        return x * np.rec.fromfile(name, dtype="f4")[0]["f0"]

    return f


@pytest.mark.parametrize("make", [_memmap_reader, _records_reader])
def test_numpy_file_readers_make_their_reader_never_shared(make):
    assert es.stable_key(make()) != es.stable_key(make())
