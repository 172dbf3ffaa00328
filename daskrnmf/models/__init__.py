"""The models, and the one registry that the package, the CLI and the tests read.

Each model module reads as: docstring with the objective and the paper, constraint table
additions, initial state, one ``step``, fitted attributes.  Importing this package does
not import the models (a Dask worker that unpickles a kernel imports only
``daskrnmf.kernels``); :attr:`ModelSpec.cls` imports one on demand.
"""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """What the package knows about one model without importing it.

    Parameters
    ----------
    name : str
        The class name, as in the paper (``RFNMF``, ``ONMFO``, ...).
    module : str
        Module that defines it.
    task : str
        ``"clustering"``, ``"co-clustering"``, ``"factorization"`` or ``"classification"``.
    summary : str
        Which problem it answers, in one line (CLI help, README table).
    outputs : tuple of str
        Per-sample arrays a fit leaves for X, chunked like X's rows (the CLI writes them):
        see the estimator's ``_outputs``.
    needs_y : bool
        ``fit(X, y)`` needs class labels.
    resumable : bool
        The estimator has the parameter ``checkpoint`` and ``fit(X, resume=True)``
        continues from it (the CLI's ``--checkpoint DIR`` and ``--resume``).
    """

    name: str
    module: str
    task: str
    summary: str
    outputs: tuple = ()
    needs_y: bool = False
    resumable: bool = False

    @property
    def cls(self):
        """The estimator class (imported on first use)."""
        return getattr(importlib.import_module(self.module), self.name)


REGISTRY = {spec.name: spec for spec in (
    ModelSpec("RFNMF", "daskrnmf.models.rfnmf", "clustering",
              "clusters samples robustly: L2,1 (reweighted means) or L1 (medians) centres",
              outputs=("labels",), resumable=True),
    ModelSpec("RFNMTF", "daskrnmf.models.rfnmtf", "co-clustering",
              "clusters samples and features together (L1, block medians)",
              outputs=("labels",), resumable=True),
    ModelSpec("NMF", "daskrnmf.models.nmf", "factorization",
              "Lee-Seung NMF, the squared-error baseline", outputs=("H",), resumable=True),
    ModelSpec("RNMF", "daskrnmf.models.nmf", "factorization",
              "Kong's L2,1 robust NMF: whole corrupted samples", outputs=("H",),
              resumable=True),
    ModelSpec("ORNMF", "daskrnmf.models.ornmf", "factorization",
              "robust NMF of ordered samples (video, motion capture): segments and boundaries",
              outputs=("H",), resumable=True),
    ModelSpec("SemiNMF", "daskrnmf.models.seminmf", "factorization",
              "semi-NMF of data of any sign (Ding, Li & Jordan)", outputs=("H",),
              resumable=True),
    ModelSpec("MNMF", "daskrnmf.models.mnmf", "classification",
              "semi-NMF features trained jointly with a max-margin classifier",
              outputs=("predictions",), needs_y=True, resumable=True),
    ModelSpec("ONMFO", "daskrnmf.models.onmfo", "factorization",
              "online NMF with sparse outliers, streaming data of any size",
              outputs=("H", "R"), resumable=True),
    ModelSpec("RobustNMF", "daskrnmf.models.robustnmf", "factorization",
              "batch NMF with sparse outliers (ONMFO's batch twin)", outputs=("H", "R"),
              resumable=True),
)}


def get(name):
    """The :class:`ModelSpec` of ``name`` (case-insensitive); a ValueError listing the
    models otherwise."""
    for key, spec in REGISTRY.items():
        if key.lower() == str(name).lower():
            return spec
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(REGISTRY)}.")
