"""The README's tours shrunk for the test suite: the exact substitutions in SHRINK (each must occur in the README
exactly once, so a README edit that drops one fails instead of silently running the full study).
Shared by tests/test_readme.py and tests/test_readme_cli.py."""

from markdown_examples import ROOT, shrunk

README = ROOT / "README.md"

SHRINK = {
    # Python tour: the batch of runs (20 data sets in one program; 4 show the same, at a fifth of the cost)
    "jax.random.key(2), 20))": "jax.random.key(2), 4))",
    "jax.random.key(3), 20),": "jax.random.key(3), 4),",
    # Python tour: the studies
    "simulations=500, key=0)": "simulations=4, references=2, samples=400, key=0, steps=400)",
    "runs=20, key=0)": "runs=2, samples=200, key=0, steps=100)",
    # Python tour: tuning (60 trials and a 200-simulation check took 3–4 minutes per ε for M1)
    "key=0, trials=12)": "key=0, trials=2, simulations=4, check_simulations=4, predictions=16)",
    "epsilons=(0.1, 0.3, 1.0), key=0)": "epsilons=(1.0,), simulations=4, key=0)",
    "epsilon=1.0, simulations=100, key=0)": "epsilon=1.0, simulations=4, key=0)",
    # command line: tuning
    "--out m1-settings.json  #": "--trials 2 --simulations 4 --check-simulations 4 --curve-epsilons 1 "
    "--curve-simulations 4 --out m1-settings.json  #",
    "--settings m1-settings.json\n": "--settings m1-settings.json --simulations 4\n",
    # command line: the studies and the 4-chain NUTS fit
    "--methods exact,nuts,naive --out coverage/": "--methods exact,nuts,naive --out coverage/ "
    "--simulations 3 --references 2 --samples 300 --steps 300 --warmup 100",
    # (the non-private reference, 4000 NUTS draws on all 30 162 rows, took 5 minutes here: it runs in
    # tests/test_cli_calibrate.py on a small data set instead)
    "--methods exact,naive,dpvim,nonprivate --out calibration/": "--methods exact,naive,dpvim "
    "--out calibration/ --runs 2 --samples 100 --steps 100",
    "--chains 4 --out m1-nuts.nc": "--chains 4 --warmup 100 --draws 100 --out m1-nuts.nc",
}


def shrunk_readme() -> str:
    return shrunk(README, SHRINK)
