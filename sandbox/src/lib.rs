//! comb-sandbox: a Kubernetes API emulator faithful enough for `kube::Client` and `kubectl`.
