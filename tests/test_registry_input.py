"""`es.register` refuses bad input at once, naming the call and the fix."""

import pytest

import eqxstable as es


def _double(x):
    return 2 * x


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_name_is_refused(name):
    with pytest.raises(ValueError, match=r"`eqxstable.register\(.*\)`: the name is empty"):
        es.register(name, _double)
    with pytest.raises(ValueError, match="the name is empty"):
        es.register(name)


@pytest.mark.parametrize("fn", [3, "relu", 2.5])
def test_a_non_callable_is_refused(fn):
    expected = r"`eqxstable.register\('x', fn\)`: `fn` must be a callable"
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
