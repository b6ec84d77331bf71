#!/usr/bin/env bash
# A second real node beside the kit's (../shared/kit/node-up.sh), for tests that need a node to
# die while another takes its pods: its own kubelet and containerd (the kit's binaries, Debian's
# containerd), in its own network namespace (its hostNetwork pods bind what they like), its own
# mount namespace (its own /var/lib/kubelet, so production DaemonSets work as they are there too)
# and its own cgroup (/overcast-node-b in every v1 hierarchy), so that "the VM powers off" is
# what it is on a hypervisor: every process of the node killed at once, its mounts gone with its
# mount namespace, its network gone with its network namespace.
#
#   eval "$(integration/scripts/node-b.sh up KIT_NODE_DIR DIR)"  # OVERCAST_TEST_NODE_B… exports
#   integration/scripts/node-b.sh power-off DIR                   # the VM stops, as by a pull of
#                                                                 # the plug (nothing is told)
#   integration/scripts/node-b.sh down DIR                        # off, then everything removed
#
# `up` on a DIR a powered-off node-b left is a power-on: its disk's images (containerd's root)
# are kept, everything else starts anew (kubelet's directory, containerd's state, the network);
# of the kit node's images only those it lacks, or holds at another digest, are copied in.
#
# The node is "vm-b", registered with the taint overcast.dev/node-b=:NoSchedule (only pods that
# tolerate it, and DaemonSets, land there); NODE_B_KUBELET_ARGS adds kubelet flags. Its network:
# 10.250.0.2/30 on a veth to this machine (10.250.0.1), pods on 10.244.1.0/24, the API server and
# the `kubernetes` Service (10.96.0.1:443) forwarded into it. Not there: the API server cannot
# reach this kubelet (no `kubectl logs`/`exec` for its pods). Only the export lines go to stdout.
# A loop device a volume left bound is the caller's (the cloud's) to detach: a VM's disks stay
# attached on a hypervisor too until someone detaches them.
set -euo pipefail
exec 3>&1 1>&2
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "node-b: run it as root" >&2; exit 1; }
cmd=${1:?usage: node-b.sh up KIT_NODE_DIR DIR | power-off DIR | down DIR}
node=vm-b cg=overcast-node-b
veth=ovcb0 host_ip=10.250.0.1 node_ip=10.250.0.2
bridge=kitcni1 pod_cidr=10.244.1.0/24 gw=10.244.1.1 svc_ip=10.96.0.1
cache=${KIT_CACHE:-/var/cache/overcast-kit}
say() { echo "node-b: $*" >&2; }
hierarchies() { for h in /sys/fs/cgroup/*; do if [ -d "$h" ] && [ ! -L "$h" ] && [ -f "$h/tasks" ]; then echo "$h"; fi; done; }
# pids in the node's cgroup (the pids hierarchy holds all of them)
members() { find "/sys/fs/cgroup/pids/$cg" -name tasks -exec cat {} + 2>/dev/null | sort -u; }

power_off() {
  local froze=
  if [ -d "/sys/fs/cgroup/freezer/$cg" ]; then
    echo FROZEN > "/sys/fs/cgroup/freezer/$cg/freezer.state" && froze=1
  fi
  local pids
  for _ in $(seq 50); do
    pids=$(members)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    [ -n "$froze" ] && echo THAWED > "/sys/fs/cgroup/freezer/$cg/freezer.state"
    sleep 0.1
  done
  [ -z "$(members)" ] || { say "processes of $cg survive: $(members | tr '\n' ' ')"; return 1; }
  ip route del "$pod_cidr" 2>/dev/null || true
}

remove_cgroups() {
  local h
  for h in $(hierarchies); do
    [ -d "$h/$cg" ] && find "$h/$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

case "$cmd" in
power-off)
  dir=${2:?usage: node-b.sh power-off DIR}
  power_off
  say "$node is off"
  exit 0
  ;;
down)
  dir=${2:?usage: node-b.sh down DIR}
  power_off || true
  remove_cgroups
  [ -f "$dir/.node-b" ] && rm -rf "$dir"
  say "$node is down"
  exit 0
  ;;
up) ;;
*) echo "node-b: unknown command $cmd" >&2; exit 1 ;;
esac

kit=${2:?usage: node-b.sh up KIT_NODE_DIR DIR} dir=${3:?usage: node-b.sh up KIT_NODE_DIR DIR}
[ -f "$kit/env" ] || { echo "node-b: no kit node in $kit (../shared/kit/node-up.sh first)" >&2; exit 1; }
[ ${#dir} -le 60 ] || { echo "node-b: DIR is too long for unix sockets under it: $dir" >&2; exit 1; }
if [ -n "$(members)" ]; then echo "node-b: $node runs already ($cg has processes); down it first" >&2; exit 1; fi
remove_cgroups
# Only a directory this script made (its marker) or an empty one is cleared: a mistyped DIR
# must not lose anything.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/.node-b" ]; then
  echo "node-b: $dir is not empty and is not a second node's directory" >&2; exit 1
fi
if [ -f "$dir/.node-b" ] && [ -d "$dir/containerd/root" ]; then
  # A power-on: the node's disk kept (its images), the rest as after a reboot.
  find "$dir" -mindepth 1 -maxdepth 1 ! -name .node-b ! -name containerd -exec rm -rf {} +
  find "$dir/containerd" -mindepth 1 -maxdepth 1 ! -name root -exec rm -rf {} +
  say "powering on: its images kept"
else
  rm -rf "$dir"; mkdir -p "$dir"; touch "$dir/.node-b"
fi
kubeconfig=$kit/kube/admin.kubeconfig pki=$kit/kube/pki
port=$(grep -o 'https://127.0.0.1:[0-9]*' "$kubeconfig" | cut -d: -f3)
kubelet=$(ls "$cache"/kubelet-v* | head -1)
[ -x "$kubelet" ] || { echo "node-b: no kubelet in $cache (node-up.sh unpacks it)" >&2; exit 1; }

# --- the cgroup every process of the node is started in -----------------------------------------
for h in $(hierarchies); do
  mkdir -p "$h/$cg"
  if [ -f "$h/cpuset.cpus" ]; then cat "$h/cpuset.cpus" > "$h/$cg/cpuset.cpus"; cat "$h/cpuset.mems" > "$h/$cg/cpuset.mems"; fi
done
# `inside CMD…`: CMD in the node's cgroup, network and mount namespaces, in its own session,
# log DIR/NAME.log (the first argument names it)
enter_cg='for h in '"$(hierarchies | tr '\n' ' ')"'; do echo $$ > "$h/'"$cg"'/tasks"; done'
start_in_cg() { local name=$1; shift; setsid sh -c "$enter_cg"'; exec "$@"' sh "$@" > "$dir/$name.log" 2>&1 < /dev/null 3>&- & }

# --- the namespaces: held by a process that only sleeps ------------------------------------------
cat > "$dir/hold.sh" <<EOF
set -e
mount --make-rprivate /
# other tests' disks, copied in with this machine's mounts, are not this node's to hold
sh "$here/drop-loop-mounts.sh"
mkdir -p $dir/kubelet /var/lib/kubelet
# the kit node's /var/lib/kubelet (a bind mount, with its pods' volumes under it) is not
# this node's: gone from this namespace, so that the only mount there is this node's own
if mountpoint -q /var/lib/kubelet; then umount -R /var/lib/kubelet 2>/dev/null || umount -R -l /var/lib/kubelet; fi
mount --bind $dir/kubelet /var/lib/kubelet
mount --make-rshared /var/lib/kubelet
ip link set lo up
ip addr add $svc_ip/32 dev lo
sysctl -qw net.ipv4.ip_forward=1
echo \$\$ > $dir/holder
touch $dir/held
exec sleep infinity
EOF
start_in_cg hold unshare --net --mount -- sh "$dir/hold.sh"
for _ in $(seq 50); do [ -f "$dir/held" ] && break; sleep 0.1; done
[ -f "$dir/held" ] || { cat "$dir/hold.log" >&2; echo "node-b: the namespaces were not made" >&2; exit 1; }
holder=$(cat "$dir/holder")
in_ns=(nsenter -t "$holder" -n -m)

# --- network: a veth to this machine --------------------------------------------------------------
ip link del "$veth" 2>/dev/null || true
ip link add "$veth" type veth peer name eth0 netns "$holder"
ip addr add "$host_ip/30" dev "$veth"
ip link set "$veth" up
"${in_ns[@]}" ip addr add "$node_ip/30" dev eth0
"${in_ns[@]}" ip link set eth0 up
"${in_ns[@]}" ip route add default via "$host_ip"
ip route replace "$pod_cidr" via "$node_ip"

# --- the API server (and the `kubernetes` Service) inside the node's network ----------------------
start_in_cg forward python3 "$here/netns-forward.py" "/proc/$holder/ns/net" \
  "127.0.0.1:$port=127.0.0.1:$port" "$svc_ip:443=127.0.0.1:$port"
for _ in $(seq 50); do "${in_ns[@]}" curl -sk --max-time 1 "https://127.0.0.1:$port/healthz" 2>/dev/null | grep -q ok && break; sleep 0.1; done
"${in_ns[@]}" curl -sk --max-time 2 "https://$svc_ip/healthz" | grep -q ok || { echo "node-b: the API server is not reachable from the node" >&2; exit 1; }

# --- containerd -----------------------------------------------------------------------------------
ctrd=$dir/containerd sock=$dir/containerd/containerd.sock
mkdir -p "$ctrd" "$dir/cni/net.d" "$dir/cni/ipam"
sed -e "s#$kit/containerd#$ctrd#g" -e "s#$kit/cni#$dir/cni#g" "$kit/containerd/config.toml" > "$ctrd/config.toml"
sed -e "s#$kit/cni#$dir/cni#g" -e "s#kitcni0#$bridge#g" -e "s#10.244.0.0/24#$pod_cidr#g" -e "s#10.244.0.1#$gw#g" \
  "$kit/cni/net.d/10-kit-bridge.conflist" > "$dir/cni/net.d/10-kit-bridge.conflist"
grep -q "$ctrd" "$ctrd/config.toml" || { echo "node-b: the kit's containerd config is not what this script knows" >&2; exit 1; }
start_in_cg containerd "${in_ns[@]}" containerd --config "$ctrd/config.toml"
ctr=(ctr -a "$sock" -n k8s.io)
for _ in $(seq 100); do "${ctr[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
"${ctr[@]}" version >/dev/null
# the kit node's images (pause, busybox, the sidecars, whatever a test imported already) that
# this node lacks: each "REF DIGEST" of the kit's not among its own is copied
kit_ctr=(ctr -a "$kit/containerd/containerd.sock" -n k8s.io)
images_of() { "$@" images ls | awk 'NR > 1 && $1 !~ /^sha256:/ {print $1, $3}' | sort; }
copied=0
while read -r ref _; do
  "${kit_ctr[@]}" images export --platform linux/amd64 - "$ref" |
    "${ctr[@]}" images import --snapshotter overlayfs - >/dev/null
  copied=$((copied + 1))
done < <(comm -23 <(images_of "${kit_ctr[@]}") <(images_of "${ctr[@]}"))
sed "s#$kit/containerd/containerd.sock#$sock#g" "$kit/image-import" > "$dir/image-import"
chmod +x "$dir/image-import"
say "containerd up, images: $("${ctr[@]}" images ls -q | grep -vc '^sha256:') ($copied copied from the kit's node)"

# --- kubelet --------------------------------------------------------------------------------------
mkdir -p "$dir/pki"
(
  cd "$dir/pki"
  openssl req -newkey rsa:2048 -nodes -keyout kubelet.key -out kubelet.csr -subj "/O=system:nodes/CN=system:node:$node"
  printf "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n" > client.ext
  openssl x509 -req -in kubelet.csr -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -out kubelet.crt -days 7 -extfile client.ext
) >/dev/null 2>&1
sed -e "s#$kit/pki#$dir/pki#g" -e "s#system:node:vm\"#system:node:$node\"#g" "$kit/kubelet.kubeconfig" > "$dir/kubelet.kubeconfig"
sed -e "s#^port: .*#port: 10250#" -e "s#^healthzPort: .*#healthzPort: 10248#" "$kit/kubelet-config.yaml" > "$dir/kubelet-config.yaml"
printf 'cgroupRoot: /%s\nregisterWithTaints: [{key: overcast.dev/node-b, effect: NoSchedule}]\n' "$cg" >> "$dir/kubelet-config.yaml"
# shellcheck disable=SC2206
start_in_cg kubelet "${in_ns[@]}" "$kubelet" --config "$dir/kubelet-config.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
  --container-runtime=remote --container-runtime-endpoint="unix://$sock" \
  --pod-infra-container-image=registry.k8s.io/pause:3.7 --root-dir /var/lib/kubelet \
  --hostname-override "$node" --node-ip "$node_ip" --v=2 ${NODE_B_KUBELET_ARGS:-}
ready() {
  KUBECONFIG=$kubeconfig kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}
for _ in $(seq 180); do
  ready && break
  [ -n "$(members)" ] || { echo "node-b: the node's processes died; see $dir/*.log" >&2; exit 1; }
  sleep 0.5
done
ready || { echo "node-b: $node did not become Ready in 90 s; see $dir/kubelet.log" >&2; exit 1; }
cat > "$dir/env" <<EOF
export OVERCAST_TEST_NODE_B=$node
export OVERCAST_TEST_NODE_B_DIR=$dir
export OVERCAST_TEST_NODE_B_IMAGE_IMPORT=$dir/image-import
EOF
say "$node Ready"
cat "$dir/env" >&3
