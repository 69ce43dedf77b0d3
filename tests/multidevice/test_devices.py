import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec


def test_eight_fake_devices():
    # `scripts/test.sh` runs this directory with XLA faking 8 CPU devices; if the flag stopped
    # reaching XLA, every sharding test here would quietly test one device.
    assert len(jax.devices()) == 8


def test_sharded_array_round_trip():
    mesh = jax.make_mesh((8,), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    x = jax.device_put(jnp.arange(16.0), sharding)
    assert len(x.addressable_shards) == 8
    assert jnp.array_equal(jax.jit(lambda y: 2 * y)(x), 2 * jnp.arange(16.0))
