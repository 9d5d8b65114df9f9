"""HEALTHY look-alike of sklearn_kmeans_fork.py: the child is started with spawn.

Source: scikit-learn/scikit-learn#23823 (the remedy given there: a start method other
than fork; https://github.com/scikit-learn/scikit-learn/issues/23823).
Versions: CPython 3.11.7, scikit-learn 1.9.1 (vendored libgomp), numpy 2.4.6.
Looks like a hang: the parent waits in Process.join while the spawned child imports
scikit-learn and runs KMeans with a fresh OpenMP team.
Ends: exit 0 after the child prints its inertia.
Run: python ok_sklearn_kmeans_spawn.py
"""

import multiprocessing as mp
import os

os.environ.setdefault("OMP_NUM_THREADS", "4")

import numpy as np
from sklearn.cluster import KMeans  # type: ignore[import-untyped, import-not-found, unused-ignore]


def cluster(seed: int) -> None:
    data = np.random.default_rng(seed).normal(size=(20000, 8))
    km = KMeans(n_clusters=8, n_init=1, random_state=seed).fit(data)
    print("inertia", round(float(km.inertia_), 1), flush=True)


if __name__ == "__main__":
    cluster(0)
    p = mp.get_context("spawn").Process(target=cluster, args=(1,))
    p.start()
    p.join()
    print("child exit", p.exitcode, flush=True)
    raise SystemExit(p.exitcode)
