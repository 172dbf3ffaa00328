"""Figures of fitted models (matplotlib, the ``[plot]`` extra).

* :func:`plot_objective` — objective against iteration (any model with
  ``objective_history_``; several models on one axes to compare them).
* :func:`plot_components` — components as a grid of images, as in the ONMFO paper's
  Figures 2-3 (Zhao and Tan, ICASSP 2016).
* :func:`plot_ordered_codes` — H along the sample order with the jumps ||h_{i+1} - h_i||
  and the detected boundaries, as in the ORNMF paper's Figures 1-2 (Wang et al.,
  IJCNN 2017).

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
    """Plot the objective against the iteration for one or more fitted models.

    One line per model, on one axes, so that models or settings can be compared.

    Parameters
    ----------
    *models : fitted estimators or ndarrays of shape (n_iter,)
        Each either has an ``objective_history_`` attribute (any fitted daskrnmf
        model), or is itself the history, one objective value per iteration (per pass
        for ``ONMFO``).
    labels : list of str, default=None
        Legend entry of every model; None uses the class name of an estimator and
        ``"run i"`` for the i-th argument when it is an ndarray.
    ax : matplotlib.axes.Axes, default=None
        Axes to draw on; None draws on a new figure.
    log : bool, default=True
        Whether the objective axis is logarithmic.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure of the axes drawn on.

    Examples
    --------
    >>> import numpy as np
    >>> import matplotlib.pyplot as plt
    >>> from daskrnmf.plotting import plot_objective
    >>> fig = plot_objective(np.array([10.0, 5.0, 3.0, 2.5]), np.array([9.0, 6.0, 4.0]),
    ...                      labels=["alpha=0.1", "alpha=0.5"])
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['alpha=0.1', 'alpha=0.5']
    >>> fig.axes[0].get_yscale()
    'log'
    >>> plt.close(fig)

    With fitted models, ``plot_objective(model_a, model_b)`` labels the lines by class.
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
    """Show components (the rows of ``components_``) as a grid of grey images.

    Each component is scaled by its own maximum; tiles are separated by a one-pixel
    white border.

    Parameters
    ----------
    components : ndarray of shape (n_components, n_features) or fitted estimator
        The components, or a model with a ``components_`` attribute.
    image_shape : tuple of int (height, width)
        Shape of one image; ``height * width`` must equal ``n_features``.
    n_cols : int, default=None
        Number of images per row of the grid; None makes the grid about square
        (``ceil(sqrt(n_components))`` columns).
    order : {"F", "C"}, default="F"
        How a row unfolds into an image: column-major (``"F"``, as the bundled faces of
        :func:`daskrnmf.datasets.load_orl` and :func:`~daskrnmf.datasets.load_yale`) or
        row-major (``"C"``, as :func:`~daskrnmf.datasets.load_digits`).
    ax : matplotlib.axes.Axes, default=None
        Axes to draw on; None draws on a new figure.
    title : str, default=None
        Title of the axes.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure of the axes drawn on.

    Raises
    ------
    ValueError
        If ``image_shape`` does not hold ``n_features`` pixels.

    References
    ----------
    .. [1] R. Zhao and V. Y. F. Tan, "Online Nonnegative Matrix Factorization with
       Outliers", IEEE International Conference on Acoustics, Speech and Signal
       Processing (ICASSP), 2016 (Figures 2-3 show bases this way).

    Examples
    --------
    >>> import numpy as np
    >>> import matplotlib.pyplot as plt
    >>> from daskrnmf.plotting import plot_components
    >>> components = np.random.default_rng(0).random((4, 6))
    >>> fig = plot_components(components, (2, 3), title="4 components")
    >>> fig.axes[0].images[0].get_array().shape    # 2 x 2 tiles of 2 x 3 pixels + borders
    (7, 9)
    >>> plt.close(fig)
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
    """Plot codes along the sample order (top) and the jumps between neighbours (bottom).

    The top axes show H as an image (components against samples); the bottom axes show
    the jump ``||h_{i+1} - h_i||`` between consecutive codes, which peaks at segment
    boundaries when the codes are piecewise constant, as ``ORNMF``'s ordered penalty
    makes them. Detected boundaries are drawn as red vertical lines on both.

    Parameters
    ----------
    H : array-like of shape (n_samples, n_components)
        Codes in the stored sample order, e.g. ``ORNMF.fit_transform(X)``. A Dask array
        is computed, so keep it small enough for memory.
    boundaries : array-like of int, default=None
        First samples of new segments (``ORNMF.boundaries_``); None draws no lines.
    jumps : ndarray of shape (n_samples - 1,), default=None
        Precomputed jumps (``ORNMF.jumps_``); None computes them from ``H``.
    ax : pair of matplotlib.axes.Axes, default=None
        Top and bottom axes to draw on; None draws on a new figure with a shared
        sample axis.
    max_samples : int, default=5000
        Longer sequences are drawn every ``ceil(n_samples / max_samples)``-th sample.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure of the top axes.

    Raises
    ------
    ValueError
        If ``H`` is not 2-D.

    Notes
    -----
    Wang et al. read the boundaries off the peaks of the columns of HR, the differences
    of consecutive codes (their Figure 1), and show H as an image (their Figure 2);
    here the jump is the Euclidean norm of each difference.

    References
    ----------
    .. [1] J. Wang, F. Tian, C. H. Liu, H. Yu, X. Wang and X. Tang, "Robust Nonnegative
       Matrix Factorization with Ordered Structure Constraints", International Joint
       Conference on Neural Networks (IJCNN), 2017.

    Examples
    --------
    >>> import numpy as np
    >>> import matplotlib.pyplot as plt
    >>> from daskrnmf.plotting import plot_ordered_codes
    >>> H = np.repeat(np.eye(3), 4, axis=0)          # 3 segments of 4 identical codes
    >>> fig = plot_ordered_codes(H, boundaries=[4, 8])
    >>> top, bottom = fig.axes
    >>> len(bottom.lines)                            # the jumps and one line per boundary
    3
    >>> plt.close(fig)
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
