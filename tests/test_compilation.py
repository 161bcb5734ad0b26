"""The persistent compilation cache: a program compiled in one process is read back, not compiled, in the next;
"off" turns it off."""

import json
import os
import subprocess
import sys

from noiseaware.util.compilation import CACHE_ENV

# Compiles one program and prints the folder in use and the cache events JAX reported.
PROGRAM = """
import json, jax, jax.numpy as jnp
from noiseaware.util.compilation import use_compilation_cache
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
folder = use_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # this small program too, whatever the threshold
def f(x):
    for i in range(300):
        x = jnp.sin(x) * (i + 1.0) + jnp.cos(x * 0.5)
    return x
jax.jit(f)(jnp.ones(3)).block_until_ready()
print(json.dumps({"folder": None if folder is None else str(folder), "events": sorted(set(events))}))
"""


def run(cache: str) -> dict:
    env = os.environ | {CACHE_ENV: cache}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_process_reads_the_compiled_program_back(tmp_path):
    folder = tmp_path / "jax"
    first, second = run(str(folder)), run(str(folder))
    assert first["folder"] == second["folder"] == str(folder)
    assert "/jax/compilation_cache/cache_misses" in first["events"]
    assert "/jax/compilation_cache/cache_hits" not in first["events"]
    assert "/jax/compilation_cache/cache_hits" in second["events"]
    assert any(name.startswith("jit_f-") for name in os.listdir(folder))


def test_off_compiles_without_a_cache():
    result = run("off")
    assert result["folder"] is None
    assert not {"/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"} & set(result["events"])


def test_a_cache_folder_others_may_write_is_not_used_and_a_new_one_is_the_users_alone(tmp_path):
    """Whoever can write the cache folder can make this process run a program of theirs: a folder its group or
    others may write is refused with a warning naming the fix (nothing configured); a folder the cache creates is
    mode 0o700 (in another process, which keeps this one's cache settings)."""
    import pytest

    from noiseaware.util.compilation import use_compilation_cache

    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    with pytest.warns(UserWarning, match="chmod go-w"):
        assert use_compilation_cache(open_folder) is None
    assert run(str(open_folder))["folder"] is None
    created = tmp_path / "mine" / "jax"
    assert run(str(created))["folder"] == str(created)
    assert created.stat().st_mode & 0o777 == 0o700
