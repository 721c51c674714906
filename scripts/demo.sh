#!/usr/bin/env bash
# make demo: a 3-node sandbox cluster and the Service ladder, with the real datapath.
# FERRY_DEMO_NAME picks the sandbox name; FERRY_DEMO_DOWN=1 tears it down at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${FERRY_DEMO_NAME:-demo}
ferry() { node bin/ferry.js "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fetch() { ferry sandbox exec --name "$NAME" "$1" -- curl -sS --max-time 3 "$2" 2>&1 | grep -E '^(Hostname|RemoteAddr)|curl' | paste -sd' ' - || true; }
# 40 requests from the client to URL, one every INTERVAL s, in the background; then
# loop_report waits for them and prints how many were answered.
loop_start() {
  ferry sandbox exec --name "$NAME" client -- sh -c "ok=0; lost=0; for i in \$(seq 1 40); do if curl -s -o /dev/null --max-time 0.5 $1; then ok=\$((ok+1)); else lost=\$((lost+1)); fi; sleep $2; done; echo \"\$ok answered, \$lost lost\"" > "/tmp/ferry-demo-$NAME-loop" &
  loop=$!
  sleep 1
}
loop_report() {
  wait "$loop"
  echo "  requests: $(cat "/tmp/ferry-demo-$NAME-loop")"; rm -f "/tmp/ferry-demo-$NAME-loop"
}

started=$(date +%s)
step "A 3-node cluster in network namespaces (router, client, nodes, test API server, one ferry agent per node, ferry operator)"
ferry sandbox up --name "$NAME" --nodes 3
ferry sandbox apply --name "$NAME" -f demo/whoami.yaml
ferry sandbox apply --name "$NAME" -f demo/solo.yaml
for _ in $(seq 1 100); do
  out=$(fetch pod/toolbox http://10.96.0.100/)
  [[ $out == Hostname:* ]] && break
  sleep 0.2
done
# The operator gives the LoadBalancer addresses; the nodes announce them to the router by BGP.
for _ in $(seq 1 100); do
  out=$(fetch client http://10.0.100.11/)
  [[ $out == Hostname:* ]] && break
  sleep 0.2
done

step "1. ClusterIP: a whoami Deployment (2 replicas) curled from a pod (toolbox, on node-2)"
for _ in 1 2 3 4; do echo "  toolbox → 10.96.0.100:80      $(fetch pod/toolbox http://10.96.0.100/)"; done

step "2. NodePort 30080, curled on each node from the client (10.0.10.2)"
for ip in 10.0.30.21 10.0.30.22 10.0.30.23; do echo "  client → $ip:30080   $(fetch client http://$ip:30080/)"; done

step "3. LoadBalancer: the operator gave the address (pool 'default'); the client curls it (every node announces it by BGP; the router spreads flows, ECMP)"
ferry lb list --kubeconfig "${FERRY_SANDBOX_STATE:-/run/ferry/sandboxes}/$NAME/kubeconfig" | sed 's/^/  /'
for _ in 1 2 3; do echo "  client → 10.0.100.1:80      $(fetch client http://10.0.100.1/)"; done

step "4. externalTrafficPolicy: the pod 'solo' runs on node-1 only"
echo "  ETP=Cluster, client → node-2:30090 (remote backend, SNAT):   $(fetch client http://10.0.30.22:30090/)"
echo "  ETP=Cluster, client → LB 10.0.100.10:                       $(fetch client http://10.0.100.10/)"
echo "  ETP=Local,   client → LB 10.0.100.11 (only node-1 announces it): $(fetch client http://10.0.100.11/)"
echo "  ETP=Local,   client → node-2:30091 (no local endpoint: dropped): $(fetch client http://10.0.30.22:30091/)"

step "5. SNAT against DSR: the same remote backend (solo, on node-1) through node-2"
echo "  SNAT, client → node-2:30090: $(fetch client http://10.0.30.22:30090/)"
echo "  DSR,  client → node-2:30092: $(fetch client http://10.0.30.22:30092/)"
echo "  (DSR keeps the client address, and node-1 answers the client directly: node-2 sees no reply."
echo "   The whole sandbox runs DSR with: ferry sandbox up --mode dsr, or --mode hybrid for DSR on TCP only.)"

step "6. BGP: FRR beside each agent announces the LB addresses; the router keeps one path per node and BFD watches each"
ferry bgp peers --pathspace "fys-$NAME-node-1" | sed 's/^/  node-1: /'
# The router's namespace directly: polling through `ferry sandbox exec` would add ≈ 0.2 s a look.
routes() { ip -n "fys-$NAME-router" route show 10.0.100.10 | tr '\t' ' ' | paste -sd' ' - | sed 's/  */ /g'; }
# Wait until the router has a path through every node and BFD is up with node-3.
bfd3() { vtysh -N "fys-$NAME-router" -c 'show bfd peer 10.0.30.23 json' 2>/dev/null | tr -d ' \n' | grep -c '"status":"up"' || true; }
for _ in $(seq 1 100); do
  now=$(routes)
  [[ $now == *10.0.30.21* && $now == *10.0.30.22* && $now == *10.0.30.23* && $(bfd3) == 1 ]] && break
  sleep 0.2
done
echo "  router: $(routes)"
echo "  cutting node-3 off the network (solo, the backend, is on node-1), a request every 0.1 s from the client to 10.0.100.10:"
loop_start http://10.0.100.10/ 0.1
cut=$(date +%s%N)
ferry sandbox link down --name "$NAME" node-3 >/dev/null
for _ in $(seq 1 200); do
  now=$(routes)
  [[ $now != *10.0.30.23* ]] && break
  sleep 0.02
done
echo "  after $(( ($(date +%s%N) - cut) / 1000000 )) ms (BFD): $now"
loop_report
ferry sandbox link up --name "$NAME" node-3 >/dev/null
echo "  (node-3 is back on the network: its session comes back in a few seconds, and its path with it)"

step "7. L2 announcements: a pool in the node subnet; the router asks by ARP, one node answers from BPF"
KC="${FERRY_SANDBOX_STATE:-/run/ferry/sandboxes}/$NAME/kubeconfig"
ferry sandbox apply --name "$NAME" -f demo/l2.yaml >/dev/null
for _ in $(seq 1 100); do
  out=$(fetch client http://10.0.30.200/)
  [[ $out == Hostname:* ]] && break
  sleep 0.2
done
ferry lb list --kubeconfig "$KC" | grep -E '^ADDRESS|^10\.0\.30\.' | sed 's/^/  /'
owner=$(ferry lb list --kubeconfig "$KC" | awk '$1 == "10.0.30.200" { print $(NF-1) }')
arp() { ferry sandbox exec --name "$NAME" router -- arping -c 1 -w 2 -I nodes 10.0.30.200 2>/dev/null | grep -io 'reply from .*\]' || true; }
echo "  router: who has 10.0.30.200?  $(arp)"
echo "  cutting $owner off the network (its switch port down), a request every 0.2 s from the client:"
loop_start http://10.0.30.200/ 0.2
cut=$(date +%s%N)
ferry sandbox link down --name "$NAME" "$owner" >/dev/null
before=$(arp)
for _ in $(seq 1 100); do
  now=$(arp)
  [[ -n $now && $now != "$before" ]] && break
  sleep 0.05
done
echo "  after $(( ($(date +%s%N) - cut) / 1000000 )) ms: $now"
loop_report
ferry lb list --kubeconfig "$KC" | awk '$1 == "10.0.30.200" { print "  10.0.30.200 now announced by " $(NF-1) }'
ferry sandbox link up --name "$NAME" "$owner" >/dev/null
echo "  ($owner is back on the network; the address stays where it is: no flapping)"

step "What node-1's datapath holds (ferry service list --pin-dir /sys/fs/bpf/fys-$NAME-node-1)"
ferry service list --pin-dir "/sys/fs/bpf/fys-$NAME-node-1"

step "Explore further"
cat <<TXT
  node bin/ferry.js sandbox status --name $NAME
  node bin/ferry.js sandbox exec --name $NAME client -- curl -s http://10.0.30.21:30080/
  node bin/ferry.js sandbox exec --name $NAME pod/toolbox -- curl -s http://10.96.0.100/
  node bin/ferry.js sandbox pod unready --name $NAME solo      # watch ETP=Local traffic stop
  node bin/ferry.js sandbox link down --name $NAME node-2      # pull node-2's cable (link up: back)
  node bin/ferry.js lb list --kubeconfig $KC                   # addresses, pools, who announces them
  node bin/ferry.js bgp routes --pathspace fys-$NAME-router    # what the router learnt by BGP
  node bin/ferry.js sandbox kubectl --name $NAME get svc          # needs Debian's kubectl
  node bin/ferry.js service list --pin-dir /sys/fs/bpf/fys-$NAME-node-2
Tear down:
  node bin/ferry.js sandbox down --name $NAME
TXT
echo "(demo took $(( $(date +%s) - started )) s)"
if [[ ${FERRY_DEMO_DOWN:-0} == 1 ]]; then ferry sandbox down --name "$NAME"; fi
