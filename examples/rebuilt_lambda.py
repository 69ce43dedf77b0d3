"""A lambda rebuilt in a loop interns to one object.

Equinox compares the static parts of a module (an activation function, say) by identity, so a
model rebuilt with `activation=lambda x: ...` is a new cache key every time and `filter_jit`
recompiles. `eqxstable.stable_key` keys the lambda by what it computes instead: its code, its
globals and what it captures. Equal keys mean `eqxstable.intern` hands back one canonical object.

Run: `python examples/rebuilt_lambda.py`
"""

import jax
import jax.numpy as jnp

import eqxstable as es


def make_activation(slope: float):
    # A fresh function object on every call, as when a sweep rebuilds its model each epoch.
    return lambda x: jnp.where(x > 0, x, slope * x)


def main() -> None:
    rebuilt = [make_activation(0.1) for _ in range(5)]
    canonical = [es.intern(fn) for fn in rebuilt]

    print(f"distinct lambdas built:        {len({id(fn) for fn in rebuilt})}")
    print(f"distinct objects after intern: {len({id(fn) for fn in canonical})}")
    print(f"all keys equal:                {len({es.stable_key(fn) for fn in rebuilt}) == 1}")
    assert all(fn is canonical[0] for fn in canonical)

    # A lambda that captures a different value computes something else, so it keeps its own key.
    other = make_activation(0.2)
    print(f"slope 0.2 shares the key:      {es.stable_key(other) == es.stable_key(rebuilt[0])}")
    assert es.intern(other) is not canonical[0]

    # So does one that captures a value of another type: `1` and `1.0` give different dtypes.
    assert es.stable_key(make_activation(1)) != es.stable_key(make_activation(1.0))

    x = jnp.linspace(-1.0, 1.0, 5)
    print(f"canonical(x) = {jax.device_get(canonical[0](x))}")


if __name__ == "__main__":
    main()
