# Sourced by mn4_mtu.sh / d2_rendezvous.sh: two network namespaces ("nodes") joined through a bridge that
# lives in a third namespace. Needs root (CAP_NET_ADMIN). Nothing in the host namespace is touched.
#   netns_up EP_MTU BR_MTU   -> node A = 10.77.0.1 (iface gdva, ns gdnsA), node B = 10.77.0.2 (gdvb, gdnsB)
#   netns_down
netns_down() {
  for n in gdnsA gdnsB gdnsM; do ip netns del "$n" 2>/dev/null; done
  return 0
}
netns_up() {
  local ep_mtu="$1" br_mtu="$2"
  netns_down
  for n in gdnsA gdnsB gdnsM; do ip netns add "$n"; ip -n "$n" link set lo up; done
  ip link add gdva type veth peer name gdvma
  ip link add gdvb type veth peer name gdvmb
  ip link set gdva netns gdnsA; ip link set gdvma netns gdnsM
  ip link set gdvb netns gdnsB; ip link set gdvmb netns gdnsM
  ip -n gdnsM link add gdbr0 type bridge
  ip -n gdnsM link set gdvma master gdbr0
  ip -n gdnsM link set gdvmb master gdbr0
  for d in gdvma gdvmb gdbr0; do ip -n gdnsM link set "$d" mtu "$br_mtu" up; done
  ip -n gdnsA link set gdva mtu "$ep_mtu" up
  ip -n gdnsB link set gdvb mtu "$ep_mtu" up
  # no GSO super-packets: every TCP segment leaves as a real MTU-sized frame, as on a physical NIC
  ip -n gdnsA link set gdva gso_max_segs 1
  ip -n gdnsB link set gdvb gso_max_segs 1
  ip -n gdnsA addr add 10.77.0.1/24 dev gdva
  ip -n gdnsB addr add 10.77.0.2/24 dev gdvb
}
# run_on NODE(A|B) CMD...: run a command inside a node's namespace with its gloo interface selected
run_on() {
  local node="$1"; shift
  local iface=gdva; [ "$node" = B ] && iface=gdvb
  ip netns exec "gdns$node" env GLOO_SOCKET_IFNAME="$iface" "$@"
}
