"""Statistics: clustered bootstrap, permutation nulls, cluster-robust regression, overlap."""
from .bootstrap import (BootstrapResult, cluster_bootstrap, cluster_sums, draw_counts, generator_seed,
                        item_bootstrap, percentile_interval, split_counts)
from .contrasts import CONTRAST_KINDS, bootstrap_rates, contrast_value
from .nulls import NullResult, shuffled_pairing_null, sign_flip_null
from .overlap import jaccard, phi
from .regression import logistic_regression_cluster_robust
from .statistics import clustered_balanced_accuracy, balanced_accuracy_stat, combine, kappa_stat, paired_rates, rates

__all__ = [
    "cluster_bootstrap", "item_bootstrap", "BootstrapResult", "draw_counts", "split_counts",
    "cluster_sums", "percentile_interval", "generator_seed",
    "bootstrap_rates", "contrast_value", "CONTRAST_KINDS",
    "rates", "paired_rates", "balanced_accuracy_stat", "clustered_balanced_accuracy", "kappa_stat", "combine",
    "sign_flip_null", "shuffled_pairing_null", "NullResult",
    "logistic_regression_cluster_robust", "jaccard", "phi",
]
