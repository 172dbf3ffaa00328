"""Figures of fitted models (matplotlib, the ``[plot]`` extra).

* :func:`plot_objective` — objective against iteration (any model with
  ``objective_history_``; several models on one axes to compare them).
* :func:`plot_components` — components as images, the ONMFO paper's Figures 2-3.
* :func:`plot_ordered_codes` — H along the sample order with the jumps ||h_{i+1} - h_i||
  and the detected boundaries, the ORNMF paper's Figure 2.

Each function draws on the axes it is given (or a new figure) and returns the figure.
"""

import numpy as np


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("daskrnmf.plotting needs matplotlib: pip install 'daskrnmf[plot]'.") from None
    return plt


def plot_objective(*models, labels=None, ax=None, log=True):
    """Objective against iteration for one or more fitted models (or histories).

    Parameters
    ----------
    *models : estimators with ``objective_history_``, or 1-D arrays
    labels : list of str, optional (default: the class names)
    ax : matplotlib Axes, optional
    log : bool, default=True
        Logarithmic objective axis.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    for i, m in enumerate(models):
        hist = np.asarray(getattr(m, "objective_history_", m), dtype=float)
        name = labels[i] if labels else type(m).__name__ if not isinstance(m, np.ndarray) else f"run {i}"
        ax.plot(np.arange(1, hist.size + 1), hist, marker="o", ms=3, label=name)
    ax.set_xlabel("iteration (pass for ONMFO)")
    ax.set_ylabel("objective")
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax.figure


def plot_components(components, image_shape, *, n_cols=None, order="F", ax=None, title=None):
    """Components (rows of ``components_``) as a grid of grey images.

    Parameters
    ----------
    components : ndarray (n_components, n_features) or a fitted model
    image_shape : (height, width) with height * width == n_features
    n_cols : int, optional (default: a square grid)
    order : {"F", "C"}, default="F"
        How a row unfolds into an image (the bundled faces are column-major: "F").
    ax, title : optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    W = np.asarray(getattr(components, "components_", components), dtype=float)
    h, w = image_shape
    if h * w != W.shape[1]:
        raise ValueError(f"image_shape {image_shape} holds {h * w} pixels; the components "
                         f"have {W.shape[1]} features.")
    k = W.shape[0]
    n_cols = n_cols or int(np.ceil(np.sqrt(k)))
    n_rows = int(np.ceil(k / n_cols))
    tiles = np.ones((n_rows * (h + 1) + 1, n_cols * (w + 1) + 1))
    for j in range(k):
        img = W[j].reshape((h, w), order=order)
        img = img / max(float(img.max()), 1e-12)
        r, c = divmod(j, n_cols)
        tiles[1 + r * (h + 1):(r + 1) * (h + 1), 1 + c * (w + 1):(c + 1) * (w + 1)] = img
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * n_cols + 1, 0.5 * n_rows + 1))
    ax.imshow(tiles, cmap="gray", interpolation="nearest")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax.figure


def plot_ordered_codes(H, *, boundaries=None, jumps=None, ax=None, max_samples=5000):
    """H along the sample order (top) and the jumps between consecutive codes (bottom).

    Parameters
    ----------
    H : ndarray (n_samples, n_components) (a Dask array is computed: keep it small)
    boundaries : array of int, optional
        First samples of new segments (``ORNMF.boundaries_``), drawn as vertical lines.
    jumps : ndarray (n_samples - 1,), optional (default: computed from H)
    ax : a pair of Axes, optional
    max_samples : int
        Longer sequences are shown every ``ceil(n / max_samples)``-th sample.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    H = np.asarray(H, dtype=float)
    if H.ndim != 2:
        raise ValueError(f"H must be 2-D (n_samples, n_components); got shape {H.shape}.")
    J = np.sqrt((np.diff(H, axis=0) ** 2).sum(axis=1)) if jumps is None else np.asarray(jumps)
    step = max(1, int(np.ceil(H.shape[0] / max_samples)))
    if ax is None:
        fig, ax = plt.subplots(2, 1, figsize=(7, 4), sharex=True,
                               gridspec_kw={"height_ratios": [3, 1]})
    top, bottom = ax
    top.imshow(H[::step].T, aspect="auto", cmap="viridis", interpolation="nearest",
               extent=(0, H.shape[0], H.shape[1] - 0.5, -0.5))
    top.set_ylabel("component")
    bottom.plot(np.arange(1, J.size + 1)[::step], J[::step], lw=0.8)
    bottom.set_ylabel("||h_{i+1} - h_i||")
    bottom.set_xlabel("sample (stored order)")
    for b in [] if boundaries is None else np.asarray(boundaries):
        for a in (top, bottom):
            a.axvline(b, color="red", lw=0.8, alpha=0.7)
    return top.figure
