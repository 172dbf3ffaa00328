"""Counter-based random numbers keyed on the global row index.

A draw for sample ``i`` depends only on ``(seed, stream, i)``, never on how X is
chunked or which worker holds the chunk, so every random choice the models make
(random initial indicators, k-medians++ seeding) is the same for any chunking.
"""

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x):
    """Splitmix64 finaliser, applied element-wise to a uint64 array (wraps mod 2**64)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _keyed(seed, stream, index):
    key = splitmix64(np.array([seed], dtype=np.uint64) ^ splitmix64(np.array([stream], dtype=np.uint64)))
    return splitmix64(np.asarray(index, dtype=np.uint64) ^ key)


def uniform(seed, stream, index):
    """Uniform draws in (0, 1), one per entry of ``index`` (global row indices)."""
    bits = _keyed(seed, stream, index) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def integers(seed, stream, index, high):
    """Integers in ``[0, high)``, one per entry of ``index``."""
    return (_keyed(seed, stream, index) % np.uint64(high)).astype(np.int64)


def stream_id(*parts):
    """Fold small non-negative integers into one stream id."""
    out = np.uint64(0)
    for p in parts:
        out = splitmix64(np.array([out ^ np.uint64(p)], dtype=np.uint64))[0]
    return int(out)
