"""Every default of the toolkit, as a named constant (the CLI and the library share them)."""

from __future__ import annotations

# prepare
DEV_RATIO = 0.05  # Wu et al. 2018 carve 5% dev and 10% test out of CMUdict
TEST_RATIO = 0.10
SPLIT_SEED = 1
ENCODING = "utf-8"
FEATURES_SEP = ";"  # UniMorph feature bundles: V;SG;3;PRS
BPE_MERGES = 2000  # Rios et al. 2021 §4.1, Swiss German normalization

# score
METRICS = ("wer", "per")
UNIT = "auto"
# The longest input line decode and score take, in characters (a longer one is an error):
# a word or sentence of this field is far shorter, and a 1 MB line is a wrong file.
MAX_LINE_LENGTH = 10_000
PER_AVERAGE = "corpus"
BOOTSTRAP_SEED = 12345
CONFIDENCE = 0.95
PARALLEL_MIN_LINES = 100_000  # from here on, edit distances run in worker processes
PARALLEL_MAX_WORKERS = 8
# hard attention: the largest B x T x S x d_s emission tensor computed at once in training
# (128 MiB in float32). CMUdict batches of 256 at the paper's large sizes (about 27M) fit,
# and run 1.15x faster than in blocks; beyond it, blocks of target steps are recomputed in
# the backward pass, so long sequences (inflection, words) cannot blow the memory.
HARD_EMISSION_ELEMENTS = 1 << 25

# recipes: where `$DATA/` paths point without --data-root (the environment variable
# first, then the folder the project's checkouts sit beside)
DATA_ROOT_ENV = "TRANSDUCE_DATA"
DATA_ROOT = "../shared/data"

MONOTONICITY_DELTAS = (0.0, 0.5, 1.0)  # the margins analyze-monotonicity reports

# the file formats of `analyze-monotonicity --plot` (matplotlib writes each)
PLOT_FORMATS = ("png", "pdf", "svg")

# how an ensemble combines its models' next-symbol distributions (`transduce.ensemble`)
ENSEMBLE_MEANS = ("probability", "log-probability")

# how train.json's `stop` begins when a run stopped at a training limit (max_epochs,
# max_updates, max_minutes) rather than by early stopping: experiment reports name such
# runs as maybe short of convergence
STOP_AT_LIMIT = "reached "

# the fraction of its GPU's memory a training process may allocate (`experiment run
# --gpu-memory F` sets it for the cells sharing a GPU)
GPU_MEMORY_ENV = "TRANSDUCE_GPU_MEMORY"
