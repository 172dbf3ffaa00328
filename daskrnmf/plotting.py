"""Figures of fitted models (matplotlib, the ``[plot]`` extra).

* :func:`plot_objective` — objective against iteration (any model with
  ``objective_history_``); one panel per quantity: a streaming model's per-sample mean
  per pass (ONMFO) never shares an axis with a batch model's total per iteration.
* :func:`plot_components` — components as a grid of images, as in the ONMFO paper's
  Figures 2-3 (Zhao and Tan, ICASSP 2016).
* :func:`plot_ordered_codes` — H along the sample order with the jumps ||h_{i+1} - h_i||
  and the detected boundaries, as in the ORNMF paper's Figures 1-2 (Wang et al.,
  IJCNN 2017).
* :func:`savefig` — save with the labels visible and what the axes show (labels,
  ranges, ticks) in the PNG's metadata; :func:`read_png_metadata` reads it back.

Each plotting function draws on the axes it is given (or a new figure) and returns the
figure.  Iteration, pass and sample axes have integer ticks.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from typing import Any

import numpy as np


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("daskrnmf.plotting needs matplotlib: pip install 'daskrnmf[plot]'.") from None
    return plt


def _integer_ticks(axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


ITERATION_AXES = ("iteration", "objective")
STREAM_AXES = ("pass over X", "mean objective per sample")
LOSS_NAMES = {"l21": "L2,1", "l1": "L1", "l2": "squared L2"}


def _loss(model: Any) -> str | None:
    """The ``loss`` parameter of an estimator that has one (RFNMF), else None."""
    get_params = getattr(model, "get_params", None)
    loss = get_params(deep=False).get("loss") if callable(get_params) else None
    return loss if isinstance(loss, str) else None


def history_axes(model: Any) -> tuple[str, str]:
    """What a model's ``objective_history_`` measures: ``(x label, y label)``.

    A class may say so itself (``_history_axes``); a streaming model (one with
    ``n_samples_seen_``, ONMFO) records one value per pass over X, the mean per-sample
    objective of its batches; every other model the total objective per iteration.  A
    model with a ``loss`` parameter (RFNMF) measures that loss, named in the y label
    (``"objective (L1 loss)"``): objectives of different losses are different
    quantities, which never share an axis.
    """
    if isinstance(model, (np.ndarray, list, tuple)):
        return ITERATION_AXES
    axes = getattr(type(model), "_history_axes", None)
    xlabel, ylabel = tuple(axes) if axes else (
        STREAM_AXES if hasattr(model, "n_samples_seen_") else ITERATION_AXES)
    loss = _loss(model)
    if loss is not None:
        ylabel = f"{ylabel} ({LOSS_NAMES.get(loss, loss)} loss)"
    return xlabel, ylabel


def _default_label(model: Any, i: int) -> str:
    """Legend entry of an unlabelled argument: ``"run i"`` for a history, the class
    name for an estimator, with its loss when it has one (``"RFNMF (l1)"``)."""
    if isinstance(model, np.ndarray):
        return f"run {i}"
    loss = _loss(model)
    return type(model).__name__ + (f" ({loss})" if loss is not None else "")


def _use_log(values: list[np.ndarray]) -> bool:
    """A log axis only for positive values spanning more than a decade: over a narrower
    range it has one or two major ticks and minor labels that differ in the fifth
    digit ("4.6278x10^7" beside "4.627x10^7")."""
    v = np.concatenate([h[np.isfinite(h)] for h in values]) if values else np.array([])
    return bool(v.size) and float(v.min()) > 0 and float(v.max()) > 10 * float(v.min())


def _plain_ticks(axis) -> None:
    """Tick labels as the values themselves, without an offset ("+4.6278e7" above the
    axis and ticks like 0.0002 that only make sense with it), in scientific notation
    with a common factor only beyond [1e-3, 1e5)."""
    from matplotlib.ticker import ScalarFormatter

    fmt = ScalarFormatter(useOffset=False, useMathText=True)
    fmt.set_powerlimits((-3, 5))
    axis.set_major_formatter(fmt)


def _histories(model, name):
    hist = getattr(model, "objective_history_", model)
    if isinstance(hist, list) and hist and all(np.ndim(h) == 1 for h in hist):
        if len(hist) == 1:                    # MNMF: one history per binary problem
            return [(np.asarray(hist[0], dtype=float), name)]
        return [(np.asarray(h, dtype=float), f"{name} [{i}]") for i, h in enumerate(hist)]
    return [(np.asarray(hist, dtype=float).ravel(), name)]


def plot_objective(*models: Any, labels: list[str] | None = None, ax: Any = None,
                   log: bool | str = "auto"):
    """Plot the objective against the iteration for one or more fitted models.

    Models whose histories measure the same quantity share a panel, one line each, so
    that models or settings can be compared; histories of different quantities go to
    separate panels (ONMFO's mean per-sample objective per pass next to, not on the
    axis of, RobustNMF's total objective per iteration; RFNMF's L2,1 objective next to
    its L1 objective).

    Parameters
    ----------
    *models : fitted estimators or ndarrays of shape (n_iter,)
        Each either has an ``objective_history_`` attribute (any fitted daskrnmf
        model), or is itself the history, one objective value per iteration.
    labels : list of str, default=None
        Legend entry of every model; None uses the class name of an estimator, with
        its loss when it has one (``"RFNMF (l1)"``), and ``"run i"`` for the i-th
        argument when it is an ndarray.
    ax : matplotlib.axes.Axes or sequence of Axes, default=None
        Axes to draw on, one per quantity (see :func:`history_axes`); None draws on a
        new figure with one panel per quantity.
    log : bool or "auto", default="auto"
        Whether the objective axes are logarithmic; ``"auto"``: a panel is
        logarithmic when its values are positive and span more than a decade (a fit's
        objective usually falls by a fraction of a percent after its first
        iterations, which a log axis shows with unreadable ticks), linear otherwise.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure of the axes drawn on.

    Raises
    ------
    ValueError
        If ``ax`` does not give one axes per quantity, or ``log`` is not True, False
        or ``"auto"``.

    Examples
    --------
    >>> import numpy as np
    >>> import matplotlib.pyplot as plt
    >>> from daskrnmf.plotting import plot_objective
    >>> fig = plot_objective(np.array([10.0, 5.0, 3.0, 2.5]), np.array([9.0, 6.0, 4.0]),
    ...                      labels=["alpha=0.1", "alpha=0.5"])
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['alpha=0.1', 'alpha=0.5']
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_yscale()     # 2.5 to 10: linear
    ('iteration', 'linear')
    >>> plt.close(fig)

    With fitted models, ``plot_objective(model_a, model_b)`` labels the lines by class
    (and loss); ``plot_objective(onmfo, robust_nmf)`` and ``plot_objective(rfnmf_l21,
    rfnmf_l1)`` draw two panels.
    """
    plt = _pyplot()
    if log not in (True, False, "auto"):
        raise ValueError(f"log must be True, False or 'auto'; got {log!r}.")
    groups: dict[tuple[str, str], list] = {}
    for i, m in enumerate(models):
        name = labels[i] if labels else _default_label(m, i)
        groups.setdefault(history_axes(m), []).extend(_histories(m, name))
    if not groups:
        raise ValueError("plot_objective needs at least one model or history.")
    created = ax is None
    if created:
        fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.5),
                                 squeeze=False)
        axes = list(axes[0])
    else:
        axes = list(ax) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
        if len(axes) != len(groups):
            raise ValueError(f"these histories measure {len(groups)} different quantities "
                             f"({'; '.join(f'{y} per {x}' for x, y in groups)}), which do "
                             f"not share an axis: pass ax as a list of {len(groups)} axes.")
    for a, ((xlabel, ylabel), lines) in zip(axes, groups.items()):
        for hist, name in lines:
            a.plot(np.arange(1, hist.size + 1), hist, marker="o", ms=3, label=name)
        a.set_xlabel(xlabel)
        a.set_ylabel(ylabel)
        _integer_ticks(a.xaxis)
        if log is True or (log == "auto" and _use_log([h for h, _ in lines])):
            a.set_yscale("log")
        else:
            _plain_ticks(a.yaxis)
        a.grid(alpha=0.3)
        a.legend()
    if created:
        fig.tight_layout()
    return axes[0].figure


def plot_components(components: Any, image_shape: tuple[int, int], *, n_cols: int | None = None,
                    order: str = "C", ax: Any = None, title: str | None = None):
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
    order : {"C", "F"}, default="C"
        How a row unfolds into an image: row-major (``"C"``, NumPy's
        ``images.reshape(n_images, -1)``, scikit-learn's face data sets and
        :func:`~daskrnmf.datasets.load_digits`) or column-major (``"F"``, the bundled
        faces of :func:`daskrnmf.datasets.load_orl` and
        :func:`~daskrnmf.datasets.load_yale`: pass ``order="F"`` for them, or they are
        drawn transposed).
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
        If ``image_shape`` does not hold ``n_features`` pixels, or ``order`` is not
        ``"C"`` or ``"F"``.

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
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' (row-major) or 'F' (column-major); got {order!r}.")
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


def plot_ordered_codes(H: Any, *, boundaries: Any = None, jumps: Any = None, ax: Any = None,
                       max_samples: int = 5000):
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
    created = ax is None
    if created:
        fig, ax = plt.subplots(2, 1, figsize=(7, 4), sharex=True,
                               gridspec_kw={"height_ratios": [3, 1]})
    top, bottom = ax
    top.imshow(H[::step].T, aspect="auto", cmap="viridis", interpolation="nearest",
               extent=(0, H.shape[0], H.shape[1] - 0.5, -0.5))
    top.set_ylabel("component")
    bottom.plot(np.arange(1, J.size + 1)[::step], J[::step], lw=0.8)
    bottom.set_ylabel(r"$\|h_{i+1} - h_i\|$")
    bottom.set_xlabel("sample (stored order)")
    _integer_ticks(bottom.xaxis)
    _integer_ticks(top.yaxis)
    for b in [] if boundaries is None else np.asarray(boundaries):
        for a in (top, bottom):
            a.axvline(b, color="red", lw=0.8, alpha=0.7)
    if created:
        fig.tight_layout()
    return top.figure


# ---------------------------------------------------------------- saving, with metadata
def describe_axes(fig) -> list[dict]:
    """What every axes of ``fig`` shows: labels, title, scales, limits, the ticks within
    the limits (the y ticks also as their labels and the axis's offset or factor text,
    as drawn), and each line's label and x range (the PNG metadata of :func:`savefig`)."""
    out = []
    for a in fig.axes:
        if not a.axison:
            out.append({"title": a.get_title(), "image": True})
            continue
        xlim, ylim = (float(v) for v in a.get_xlim()), (float(v) for v in a.get_ylim())
        xlim, ylim = sorted(xlim), sorted(ylim)
        ticks = [float(t) for t in a.get_xticks() if xlim[0] <= t <= xlim[1]]
        yticks = [float(t) for t in a.get_yticks() if ylim[0] <= t <= ylim[1]]
        yformat = a.yaxis.get_major_formatter()
        ytexts = [_plain_text(t) for t in yformat.format_ticks(yticks)]
        lines = []
        for line in a.lines:
            x = np.asarray(line.get_xdata(), dtype=float)
            if x.size and not line.get_label().startswith("_"):
                lines.append({"label": line.get_label(), "x": [float(x.min()), float(x.max())],
                              "n": int(x.size)})
        out.append({"title": a.get_title(), "xlabel": a.get_xlabel(), "ylabel": a.get_ylabel(),
                    "xscale": a.get_xscale(), "yscale": a.get_yscale(), "xlim": xlim,
                    "ylim": ylim, "xticks": ticks, "yticks": yticks,
                    "yticklabels": ytexts, "yoffset": _plain_text(yformat.get_offset()),
                    "lines": lines})
    return out


def _plain_text(label: str) -> str:
    """A tick label without matplotlib's mathtext markup: ``"$\\mathdefault{10^{5}}$"``
    -> ``"10^{5}"``, ``"$\\times..."`` -> ``"x..."``."""
    text = re.sub(r"\\mathdefault\{((?:[^{}]|\{[^{}]*\})*)\}", r"\1", str(label))
    return text.replace("\\times", "x").replace("$", "").strip()


def savefig(fig, path: str | os.PathLike, *, title: str | None = None, **kwargs: Any) -> str:
    """Save ``fig`` with nothing cut off (``bbox_inches="tight"``) and, in a PNG, what it
    shows in its metadata: ``Title`` and ``Description`` (JSON of :func:`describe_axes`).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or os.PathLike
    title : str, default=None
        The ``Title`` entry; None uses the file name.
    **kwargs
        Passed to ``fig.savefig`` (``dpi``, ...).

    Returns
    -------
    path : str

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import matplotlib.pyplot as plt
    >>> from daskrnmf.plotting import plot_objective, read_png_metadata, savefig
    >>> tmp = tempfile.TemporaryDirectory()
    >>> fig = plot_objective(np.array([4.0, 2.0, 1.5]))
    >>> path = savefig(fig, os.path.join(tmp.name, "objective.png"), dpi=50)
    >>> meta = read_png_metadata(path)
    >>> import json
    >>> axes = json.loads(meta["Description"])
    >>> axes[0]["xlabel"], axes[0]["lines"][0]["x"]
    ('iteration', [1.0, 3.0])
    >>> plt.close(fig); tmp.cleanup()
    """
    path = os.fspath(path)
    kwargs.setdefault("bbox_inches", "tight")
    if path.lower().endswith(".png"):
        meta = {"Title": title or os.path.basename(path),
                "Description": json.dumps(describe_axes(fig)), "Software": "daskrnmf"}
        kwargs["metadata"] = {**meta, **kwargs.get("metadata", {})}
    fig.savefig(path, **kwargs)
    return path


def read_png_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The text entries of a PNG (``tEXt``, ``zTXt`` and ``iTXt`` chunks), with the
    standard library only.

    Raises
    ------
    ValueError
        If ``path`` is not a PNG file.
    """
    out = {}
    with open(path, "rb") as fh:
        if fh.read(8) != b"\x89PNG\r\n\x1a\n":
            raise ValueError(f"{os.fspath(path)} is not a PNG file.")
        while True:
            head = fh.read(8)
            if len(head) < 8:
                break
            length, kind = struct.unpack(">I4s", head)
            data = fh.read(length)
            fh.read(4)                                     # CRC
            if kind == b"tEXt":
                key, _, value = data.partition(b"\0")
                out[key.decode("latin-1")] = value.decode("latin-1")
            elif kind == b"zTXt":
                key, _, rest = data.partition(b"\0")
                out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
            elif kind == b"iTXt":
                key, _, rest = data.partition(b"\0")
                compressed, rest = rest[0], rest[2:]
                _, _, rest = rest.partition(b"\0")        # language tag
                _, _, text = rest.partition(b"\0")        # translated keyword
                out[key.decode("latin-1")] = (zlib.decompress(text) if compressed
                                              else text).decode("utf-8")
            elif kind == b"IEND":
                break
    return out
