#!/usr/bin/env bash
# The fleet demo: a 3-member etcd cluster on loopback ports and two klockd
# "hosts" on this machine (each with its own sockets and fleet marker; the
# sessions' cgroups, backups and logs are per session), sharing KLIS leases
# through etcd. A session on host b that conflicts with one on host a waits
# for it, then runs. Needs root. Everything it starts is stopped on exit,
# Ctrl-C included.
set -euo pipefail
bin=$(dirname "$(realpath "${1:-bin/klock}")")
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "make fleet-demo runs real enforced sessions: run it as root (sudo make fleet-demo)" >&2; exit 1; }
command -v etcd >/dev/null || { echo "no etcd binary: scripts/deps.sh fleet installs Debian's etcd-server" >&2; exit 1; }

demo=/var/tmp/klock-fleet-demo
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
rm -rf "$demo" && mkdir -p "$demo/repo/src" "$demo/etcd"
echo "print('app')" > "$demo/repo/src/app.py"
chown -R 65534:65534 "$demo/repo"
chmod 755 "$demo"

next_port=32379
free_port() { # the next loopback port nothing listens on
	while (exec 3<>"/dev/tcp/127.0.0.1/$next_port") 2>/dev/null; do next_port=$((next_port + 1)); done
	echo $next_port
	next_port=$((next_port + 1))
}
step "A 3-member etcd cluster on loopback"
cluster="" endpoints=""
declare -A client peer
for m in m0 m1 m2; do
	free_port >"$demo/port"; client[$m]=http://127.0.0.1:$(cat "$demo/port")
	free_port >"$demo/port"; peer[$m]=http://127.0.0.1:$(cat "$demo/port")
	cluster+="${cluster:+,}$m=${peer[$m]}" endpoints+="${endpoints:+,}${client[$m]}"
done
for m in m0 m1 m2; do
	etcd --name "$m" --data-dir "$demo/etcd/$m" --listen-client-urls "${client[$m]}" --advertise-client-urls "${client[$m]}" \
		--listen-peer-urls "${peer[$m]}" --initial-advertise-peer-urls "${peer[$m]}" --initial-cluster "$cluster" \
		--initial-cluster-state new --initial-cluster-token klock-fleet-demo >"$demo/etcd/$m.log" 2>&1 &
	pids+=($!)
done
echo "endpoints $endpoints"

step "Two klockd hosts on it: host-a and host-b"
for h in a b; do
	mkdir -p "$demo/host-$h"
	KLOCK_FLEET_MARKER="$demo/host-$h/fleet.json" "$bin/klockd" --socket "$demo/host-$h/klockd.sock" \
		--api-socket "$demo/host-$h/api.sock" --store etcd --etcd-endpoints "$endpoints" \
		--etcd-prefix /klock-fleet-demo --host-name "host-$h" >"$demo/host-$h/klockd.log" 2>&1 &
	pids+=($!)
done
for h in a b; do
	for _ in $(seq 100); do [ -S "$demo/host-$h/api.sock" ] && break; sleep 0.1; done
	[ -S "$demo/host-$h/api.sock" ] || { echo "klockd host-$h did not start:"; cat "$demo/host-$h/klockd.log"; exit 1; }
	echo "host-$h: $(cat "$demo/host-$h/fleet.json" | tr -d '\n ')"
done
on() { local h=$1; shift; KLOCK_SOCKET="$demo/host-$h/klockd.sock" KLOCK_FLEET_MARKER="$demo/host-$h/fleet.json" "$@"; }

cat >"$demo/agent.yaml" <<YAML
apiVersion: klock/v1
agent: {id: fleet-demo}
mode: strict
workdir: $demo/repo
intents:
  - MUTATES FILE:\${workdir}/src/**
  - PROVIDES PROC:/usr/bin/sleep
  - PROVIDES PROC:/usr/bin/dash
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
YAML

step "host-a: an agent edits src/ for 6 seconds"
on a "$bin/klock" run -q -m "$demo/agent.yaml" -- /usr/bin/dash -c 'echo "# host-a was here" >> src/app.py; sleep 6' &
pids+=($!)
sleep 2

step "klock leases, asked of each host"
for h in a b; do echo "-- host-$h"; "$bin/klock" leases --socket "$demo/host-$h/api.sock" | grep -v CONSUMES; done

step "host-b: the same scope, with --wait: it waits for host-a's session, then runs"
start=$(date +%s%N)
on b "$bin/klock" run -m "$demo/agent.yaml" --wait 60s -- /usr/bin/dash -c 'echo "# host-b was here" >> src/app.py' 2>&1 | grep -E "waiting for|^CLEAN|^VIOLATION|waited|behind session" || true
echo "host-b's klock run took $((($(date +%s%N) - start) / 1000000)) ms"

step "src/app.py afterwards: host-a's change, then host-b's"
cat "$demo/repo/src/app.py"
