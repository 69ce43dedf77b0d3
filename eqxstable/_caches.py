from collections.abc import Callable


cache_clears: list[Callable[[], None]] = []


def clear_caches() -> None:
    """Clears every cache eqxstable keeps: the interning tables and the compiled programs of every
    stable [`eqxstable.filter_jit`][]. Registered names ([`eqxstable.register`][]) are kept.

    **Arguments:** None.

    **Returns:** None.
    """
    for cache_clear in cache_clears:
        cache_clear()
