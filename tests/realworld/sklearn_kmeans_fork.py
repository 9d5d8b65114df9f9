"""scikit-learn KMeans in a fork()ed child after the parent ran KMeans (vendored libgomp).

Source: scikit-learn/scikit-learn#23823 "KMeans not working with multiprocessing"
(https://github.com/scikit-learn/scikit-learn/issues/23823): GNU OpenMP is not fork-safe;
also python/cpython#117839 and scikit-learn/scikit-learn#19272.
Versions: CPython 3.11.7, scikit-learn 1.9.1 (its wheel vendors
scikit_learn.libs/libgomp-<hash>.so.1.0.0), numpy 2.4.6; OMP_NUM_THREADS=4 set here so the
parent starts a team of more than one thread on any host.
Hang: the parent's KMeans.fit starts a libgomp team; the fork()ed child's KMeans.fit enters
a parallel region (GOMP_parallel -> ...lloyd..._omp_fn -> gomp_team_barrier_wait_end) and
waits for team threads that did not survive the fork. The parent waits in Process.join.
Run: python sklearn_kmeans_fork.py
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
    cluster(0)  # the parent uses OpenMP first
    mp.set_start_method("fork")
    p = mp.Process(target=cluster, args=(1,))
    p.start()
    p.join()
    print("child exit", p.exitcode, flush=True)
