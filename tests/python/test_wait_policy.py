"""The package's OpenMP wait default: a short spin unless the user chose a policy or a spin."""
import os
import subprocess
import sys


def spin_after_import(env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    code = ("import os, kiln; print(os.environ.get('OMP_WAIT_POLICY', '-'), "
            "os.environ.get('GOMP_SPINCOUNT', '-'))")
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_default_is_a_short_spin():
    # ACTIVE bounds the spin by the count even when libgomp throttles (more threads than CPUs).
    assert spin_after_import({}) == "ACTIVE 10000"


def test_the_users_choice_stays():
    assert spin_after_import({"OMP_WAIT_POLICY": "PASSIVE"}) == "PASSIVE -"
    assert spin_after_import({"GOMP_SPINCOUNT": "500"}) == "- 500"
