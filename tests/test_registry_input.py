"""`es.register` refuses bad input at once, naming the call and the fix."""

import re
import types

import pytest

import eqxstable as es


def _double(x):
    return 2 * x


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_name_is_refused(name):
    with pytest.raises(
        ValueError, match=rf"`eqxstable.register\({name!r}, ...\)`: the name is empty"
    ):
        es.register(name, _double)
    with pytest.raises(ValueError, match="the name is empty"):
        es.register(name)


@pytest.mark.parametrize("fn", [3, "relu", 2.5])
def test_a_non_callable_is_refused(fn):
    expected = (
        rf"`eqxstable.register\('x', fn\)`: `fn` must be a callable .*, "
        rf"not {type(fn).__name__} {re.escape(repr(fn))}\."
    )
    with pytest.raises(TypeError, match=expected):
        es.register("x", fn)
    with pytest.raises(KeyError, match="no callable is registered under 'x'"):
        es.lookup("x")


def test_a_non_string_name_is_refused():
    with pytest.raises(TypeError, match="`name` must be a str, not int"):
        es.register(3, _double)  # pyright: ignore[reportArgumentType]


def test_the_decorator_form_still_works():
    @es.register("dropin-test-double")
    def double(x):
        return 2 * x

    assert es.lookup("dropin-test-double") is double


def test_a_taken_name_is_refused_naming_both_callables():
    es.register("taken-name-test", _double)

    def triple(x):
        return 3 * x

    with pytest.raises(
        es.RegistryError,
        match=r"`eqxstable.register\('taken-name-test', ...\)`: the name 'taken-name-test' is "
        r"already registered to <function _double .*>, which is not equivalent to the new "
        r"<function test_a_taken_name_is_refused_naming_both_callables.<locals>.triple",
    ):
        es.register("taken-name-test", triple)
    # An equivalent callable, rebuilt, is given the registered one.
    rebuilt = types.FunctionType(_double.__code__, _double.__globals__)
    assert rebuilt is not _double
    assert es.register("taken-name-test", rebuilt) is _double
    # Also once the interning tables are cleared (names are kept): the registered one, by key.
    es.clear_caches()
    again = types.FunctionType(_double.__code__, _double.__globals__)
    assert es.register("taken-name-test", again) is _double


def test_an_unknown_name_lists_up_to_three_close_matches():
    for suffix in ("aa", "ab", "ac", "ad"):
        es.register(f"close-match-{suffix}", _double)
    with pytest.raises(
        KeyError,
        match=r"no callable is registered under 'close-match-a'\. Did you mean "
        r"'close-match-a\w', 'close-match-a\w', 'close-match-a\w'\? Register one first",
    ):
        es.lookup("close-match-a")
    with pytest.raises(KeyError) as info:
        es.lookup("zzzz-nothing-like-it")
    assert "Did you mean" not in str(info.value)
    assert "under 'zzzz-nothing-like-it'. Register one first" in str(info.value)
