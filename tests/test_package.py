import importlib.metadata
import importlib.resources

import eqxstable as es


# Every public name that `../shared/CONTRACT.md` promises on `import eqxstable as es`.
CONTRACT_NAMES = [
    # 1. The interning registry.
    "intern",
    "stable_key",
    "register",
    "lookup",
    # 2. Modules.
    "StableModule",
    "stabilize",
    "field",
    # 3. The stable `filter_jit`.
    "filter_jit",
    "CacheInfo",
    "Miss",
    "report",
    "no_recompiles",
    # Errors, warnings and the one clear function.
    "RegistryError",
    "RecompileError",
    "RecompileWarning",
    "StabilityWarning",
    "clear_caches",
]


def test_version_comes_from_package_metadata():
    assert es.__version__ == importlib.metadata.version("eqxstable")


def test_ships_py_typed():
    assert importlib.resources.files("eqxstable").joinpath("py.typed").is_file()


def test_error_and_warning_bases():
    assert issubclass(es.RegistryError, KeyError)
    assert issubclass(es.RecompileError, RuntimeError)
    assert issubclass(es.RecompileWarning, UserWarning)
    assert issubclass(es.StabilityWarning, UserWarning)


def test_every_contract_name_is_exported():
    missing = [name for name in CONTRACT_NAMES if not hasattr(es, name)]
    assert missing == []
