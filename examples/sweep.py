"""A small seed sweep: the model and its optimiser are rebuilt for every epoch.

Each epoch starts a fresh trial, as a hyperparameter sweep does: a new `eqx.nn.MLP` (with its
activation written inline as a lambda) and a new `optax.adam` (a minimal Adam with the same
interface when optax is not installed), trained for a few steps with a plain `eqx.filter_jit`
train step. Nothing the train step computes changes between trials, but
every rebuild carries new function objects, which `equinox.filter_jit` compares by identity: it
compiles the train step again every epoch.

Run it as it is, then under the doctor, which explains every compile, then with eqxstable's
`filter_jit` in its place:

    python examples/sweep.py
    python -m eqxstable doctor examples/sweep.py
    python -m eqxstable doctor --stabilize examples/sweep.py
"""

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr


try:
    import optax
except ImportError:  # optax is not a dependency of eqxstable; see `adam` below.
    optax = None


def make_model(key: jax.Array) -> eqx.nn.MLP:
    # The activation is written inline, so each rebuild carries a new function object.
    return eqx.nn.MLP(
        in_size=2,
        out_size=1,
        width_size=32,
        depth=2,
        activation=lambda x: jax.nn.leaky_relu(x, negative_slope=0.1),
        key=key,
    )


class GradientTransformation(NamedTuple):
    init: Callable
    update: Callable


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Any:
    """`optax.adam(learning_rate)` when optax is installed, else a minimal Adam with the same
    interface (a NamedTuple of two closures, so it is rebuilt just as optax's is)."""
    if optax is not None:
        return optax.adam(learning_rate)

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return jnp.zeros([], jnp.int32), zeros, zeros

    def update(grads, state, params=None):
        del params
        count, mu, nu = state
        count = count + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g**2, nu, grads)
        mu_hat, nu_hat = 1 - b1**count, 1 - b2**count
        updates = jax.tree.map(
            lambda m, v: -learning_rate * (m / mu_hat) / (jnp.sqrt(v / nu_hat) + eps), mu, nu
        )
        return updates, (count, mu, nu)

    return GradientTransformation(init, update)


def loss_fn(model: eqx.nn.MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    pred = jax.vmap(model)(x)
    return jnp.mean((pred[:, 0] - y) ** 2)


@eqx.filter_jit
def train_step(model, opt_state, optim, x, y):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss


def make_data(key: jax.Array, n: int = 256) -> tuple[jax.Array, jax.Array]:
    x = jr.uniform(key, (n, 2), minval=-1.0, maxval=1.0)
    y = jnp.sin(3 * x[:, 0]) * jnp.cos(2 * x[:, 1])
    return x, y


class Progress:
    """A text progress bar over epochs: tqdm on a terminal when it is installed, else a plain one.

    Piped into a file or another program, the plain bar prints one line per epoch: what tqdm
    writes there depends on timing (how many redraws, the rates), so two runs would differ."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.bar = None
        if sys.stdout.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, desc="sweep", unit="epoch", file=sys.stdout)

    def update(self, loss: float) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}")
            self.bar.update(1)
            return
        filled = 20 * self.done // self.total
        bar = "#" * filled + "." * (20 - filled)
        end = "\n" if self.done == self.total or not sys.stdout.isatty() else ""
        print(f"\rsweep [{bar}] epoch {self.done}/{self.total}  loss {loss:.4f}", end=end)
        sys.stdout.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A small seed sweep of an MLP.")
    parser.add_argument("--epochs", type=int, default=12, help="trials (one model each)")
    parser.add_argument("--steps", type=int, default=25, help="train steps per trial")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    x, y = make_data(jr.key(0))
    start = time.perf_counter()
    best = float("inf")
    progress = Progress(args.epochs)
    for epoch in range(args.epochs):
        # A new trial: a fresh model and optimiser, as a sweep builds them.
        model = make_model(jr.key(epoch + 1))
        optim = adam(args.lr)
        opt_state = optim.init(eqx.filter(model, eqx.is_array))
        loss = jnp.inf
        for _ in range(args.steps):
            model, opt_state, loss = train_step(model, opt_state, optim, x, y)
        best = min(best, float(loss))
        progress.update(float(loss))
    progress.close()
    seconds = time.perf_counter() - start
    print(f"best final loss {best:.4f} over {args.epochs} trials in {seconds:.1f} s")


if __name__ == "__main__":
    main()
