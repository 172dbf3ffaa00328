"""The three figures of daskrnmf.plotting, saved as PNGs.

    python examples/plots.py [--out DIR]        (needs pip install "daskrnmf[plot]")

* onmfo_bases.png — ONMFO's components on ORL faces with 20 % gross corruption (the ONMFO
  paper's Figures 2-3), next to RobustNMF's;
* objective.png — the objective of both, one panel each: ONMFO's mean per-sample
  objective per pass, RobustNMF's total objective per iteration (different quantities,
  never on one axis);
* ornmf_codes.png — ORNMF's codes along a sequence of 6 segments, with the jumps between
  consecutive codes and the boundaries it found (the ORNMF paper's Figure 2).

Each PNG carries its axes' labels, ranges and ticks in its metadata
(``daskrnmf.plotting.read_png_metadata``).
"""

import argparse
import os
import warnings


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--n-components", type=int, default=25)
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskrnmf import ONMFO, ORNMF, RobustNMF, plotting
    from daskrnmf.datasets import corrupt_images, load_orl, make_ordered_segments

    warnings.simplefilter("ignore")
    os.makedirs(args.out, exist_ok=True)
    faces, _ = load_orl()
    _, noisy, _ = corrupt_images(faces, 0.2, random_state=0)
    k = args.n_components
    online = ONMFO(k, batch_size=10, random_state=0).fit(noisy)
    batch = RobustNMF(k, max_iter=200, random_state=0).fit(noisy)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.3))
    # the bundled faces are stored column-major: order="F" draws them upright
    plotting.plot_components(online, (32, 32), order="F", ax=axes[0],
                             title=f"ONMFO ({online.n_passes_} passes)")
    plotting.plot_components(batch, (32, 32), order="F", ax=axes[1],
                             title=f"RobustNMF ({batch.n_iter_} iterations)")
    fig.tight_layout()
    plotting.savefig(fig, os.path.join(args.out, "onmfo_bases.png"),
                     title="ONMFO and RobustNMF bases, ORL faces, 20 % corrupted", dpi=100)
    fig = plotting.plot_objective(online, batch, labels=["ONMFO", "RobustNMF"])
    plotting.savefig(fig, os.path.join(args.out, "objective.png"),
                     title="objective of ONMFO (per pass) and RobustNMF (per iteration)",
                     dpi=100)

    X, _ = make_ordered_segments(n_features=60, n_segments=6, segment_length=40, noise=0.1,
                                 random_state=0)
    model = ORNMF(6, n_clusters=6, random_state=0)
    H = model.fit_transform(X)
    fig = plotting.plot_ordered_codes(H, boundaries=model.boundaries_, jumps=model.jumps_)
    plotting.savefig(fig, os.path.join(args.out, "ornmf_codes.png"),
                     title="ORNMF codes along 6 segments", dpi=100)
    print("wrote onmfo_bases.png, objective.png, ornmf_codes.png to", os.path.abspath(args.out))


if __name__ == "__main__":
    main()
