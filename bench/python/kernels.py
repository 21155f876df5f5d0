"""Python reference kernels for `rocemesh-bench --only kernels`.

Usage: kernels.py DIR. Reads DIR/manifest.json and the .npy inputs the Rust side wrote,
runs scikit-learn's LocalOutlierFactor, scipy.signal.stft and
scipy.cluster.hierarchy.linkage on them, and writes the results (.npy) and
DIR/python_timings.json: per kernel the median of `repeats` timed runs, in seconds,
measured here around the kernel calls only (no interpreter start, no file I/O).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import sklearn
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.signal import get_window, stft
from scipy.spatial.distance import pdist
from sklearn.neighbors import LocalOutlierFactor


def median_time(repeats, kernel):
    """Median wall time of `repeats` runs of `kernel()`, and its last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = kernel()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def lof_scores(reference, query, k):
    """Novelty LOF of each pair's query against that pair's look-back, as rocemesh
    scores it: fit on the look-back, score the new window (score_samples is -LOF)."""
    out = np.empty(len(query))
    for p in range(len(query)):
        model = LocalOutlierFactor(n_neighbors=k, novelty=True).fit(reference[p])
        out[p] = -model.score_samples(query[p : p + 1])[0]
    return out


def stft_magnitudes(series, window, hop):
    """|STFT| per series, frame-major like rocemesh: periodic Hann, series mean removed,
    no boundary padding, unscaled (scipy's 'spectrum' scaling divides by sum(window))."""
    centred = series - series.mean(axis=1, keepdims=True)
    _, _, z = stft(
        centred,
        window="hann",
        nperseg=window,
        noverlap=window - hop,
        detrend=False,
        return_onesided=True,
        boundary=None,
        padded=False,
        axis=-1,
        scaling="spectrum",
    )
    return np.abs(z).transpose(0, 2, 1) * get_window("hann", window).sum()


def average_linkage(points):
    """scipy's average-linkage dendrogram over Euclidean distances."""
    return linkage(pdist(points), method="average")


def main():
    out = Path(sys.argv[1])
    manifest = json.loads((out / "manifest.json").read_text())
    repeats = manifest["repeats"]

    reference = np.load(out / "lof_reference.npy")
    query = np.load(out / "lof_query.npy")
    lof_s, scores = median_time(repeats, lambda: lof_scores(reference, query, manifest["lof_k"]))
    np.save(out / "py_lof_scores.npy", scores)

    series = np.load(out / "stft_series.npy")
    window, hop = manifest["stft_window"], manifest["stft_hop"]
    stft_s, mags = median_time(repeats, lambda: stft_magnitudes(series, window, hop))
    np.save(out / "py_stft_magnitudes.npy", np.ascontiguousarray(mags))

    points = np.load(out / "linkage_points.npy")
    linkage_s, z = median_time(repeats, lambda: average_linkage(points))
    np.save(out / "py_linkage_heights.npy", np.ascontiguousarray(z[:, 2]))
    labels = fcluster(z, t=manifest["linkage_groups"], criterion="maxclust")
    np.save(out / "py_linkage_labels.npy", labels.astype(np.float64))

    timings = {
        "lof_s": lof_s,
        "stft_s": stft_s,
        "linkage_s": linkage_s,
        "versions": {
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__,
        },
    }
    (out / "python_timings.json").write_text(json.dumps(timings))


if __name__ == "__main__":
    main()
