"""The issue's training script: an `eqx.filter_jit` step that reads the optimiser as a global,
a model with a lambda activation rebuilt each epoch, and `optim = optax.sgd(1e-2)` rebuilt (an
equivalent value) each epoch."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax


@eqx.filter_jit
def step(model, opt_state, x, y):
    def loss_fn(model):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optim.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, loss


loss = jnp.inf
x = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
y = jnp.sum(x, axis=1, keepdims=True)
for epoch in range(4):
    model = eqx.nn.MLP(2, 1, 8, 1, activation=lambda z: jnp.tanh(z) / 2, key=jax.random.key(epoch))
    optim = optax.sgd(1e-2)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))
    for _ in range(3):
        model, opt_state, loss = step(model, opt_state, x, y)
print(f"loss {float(loss):.4f}")
