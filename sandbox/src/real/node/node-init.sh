# PID 1 of the real node's PID and mount namespace (see node.sh): node-init.sh DIR CONTAINERD
# KUBELET [KUBELET FLAGS...]. The machine's /var/lib, /var/log and /run are replaced, in this
# mount namespace only, by directories of the node's: what containerd, runc, the CNI plugins and
# the kubelet write there by default (/run/containerd, /var/lib/cni, /var/log/containers,
# /var/log/pods, ...) stays in the sandbox's directory and goes with it.
set -eu
dir=$1 containerd=$2 kubelet=$3
shift 3
for path in var/lib var/log run; do
  mkdir -p "$dir/root/$path"
  mount --bind "$dir/root/$path" "/$path"
done
"$containerd" --config "$dir/containerd.toml" >>"$dir/containerd.log" 2>&1 &
i=0
while [ ! -S "$dir/containerd.sock" ]; do
  if ! kill -0 $! 2>/dev/null || [ "$i" -ge 600 ]; then
    echo "comb: containerd did not open its socket; its log ends:"; tail -n 20 "$dir/containerd.log"
    exit 1
  fi
  sleep 0.1
  i=$((i + 1))
done
# The kubelet is the namespace's PID 1 from here: when it ends, the node ends.
exec "$kubelet" "$@"
