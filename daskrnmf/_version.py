"""daskrnmf's version, defined once: the package (``daskrnmf.__version__``), the files
it writes (a saved model's ``daskrnmf_version``) and the build (``pyproject.toml`` reads
it as its dynamic version) all take it from here."""

__version__ = "0.1.0"
