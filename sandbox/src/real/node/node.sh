# The real node's supervisor (comb sandbox --real-node), run by the sandbox's watchdog inside the
# node's network namespace: node.sh DIR CGROUP CONTAINERD KUBELET [KUBELET FLAGS...]
#
# containerd, the kubelet and everything they start (shims, Pod sandboxes, containers) run in a
# PID and a mount namespace of their own (node-init.sh is PID 1 there): when it ends, the kernel
# kills every process in it and frees every mount the node made (overlays, secret tmpfs, the
# Pods' network namespaces, the kubelet's bind mounts), since no mount propagates out of it. What
# a namespace does not hold, the cgroups, this script makes before and removes after.
dir=$1 cgroup=$2
shift 2

# The node's cgroup in every v1 hierarchy (the kubelet's cgroupRoot must exist in each); a new
# cpuset takes its parent's CPUs and memory nodes, or nothing can join it.
for hierarchy in /sys/fs/cgroup/*/; do
  case "$hierarchy" in */unified/) continue ;; esac
  mkdir -p "$hierarchy$cgroup" || exit 1
done
if [ -d /sys/fs/cgroup/cpuset ]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset$cgroup/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset$cgroup/cpuset.mems"
fi

unshare --pid --kill-child=KILL --mount-proc --propagation private -- \
  sh "$dir/node-init.sh" "$dir" "$@" &
node=$!
# The watchdog sends TERM when the sandbox stops or dies: the node goes at once (its PID
# namespace with it), there is nothing in it to keep.
trap 'kill -KILL "$node" 2>/dev/null' TERM INT HUP
wait "$node"
status=$?
wait "$node" 2>/dev/null

# Empty cgroups, deepest first; a cgroup whose last task is still exiting refuses, so again.
i=0
while [ "$i" -lt 100 ]; do
  left=0
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy$cgroup" ] || continue
    find "$hierarchy$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || left=1
    [ -d "$hierarchy$cgroup" ] && left=1
  done
  [ "$left" = 0 ] && break
  sleep 0.1
  i=$((i + 1))
done
echo "comb: the node ended ($status); cgroups $( [ "$left" = 0 ] && echo removed || echo "left under $cgroup")"
exit "$status"
