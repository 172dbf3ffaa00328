"""One module per model: an update step plus a thin scikit-learn estimator."""
