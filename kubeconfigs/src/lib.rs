//! comb-kubeconfigs: one kube client per context, built lazily and kept.
