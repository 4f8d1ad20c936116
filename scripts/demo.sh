#!/usr/bin/env bash
# The demo: what klock enforces, shown on the example agents.
set -euo pipefail
klock=${1:-bin/klock}
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Validate the example manifests"
"$klock" validate examples/manifests/*.yaml

step "A manifest with mistakes is rejected, each problem located"
"$klock" validate examples/manifests/invalid/unknown-field.yaml examples/manifests/invalid/float-money-units.yaml \
	examples/manifests/invalid/unenforceable-path.yaml examples/manifests/invalid/reversible-without-rollback.yaml || true

step "The refund agent of seed 002: its permissions matrix"
"$klock" explain examples/manifests/refund-agent.yaml

step "A lethal-trifecta agent: HOTL is overridden to HITL"
"$klock" explain examples/manifests/trifecta-agent.yaml | sed -n '/Lethal trifecta/,/Human oversight/p'

step "Sign and verify a manifest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$klock" keygen -o "$tmp/ops"
cp examples/manifests/coding-agent.yaml "$tmp/agent.yaml"
"$klock" sign -k "$tmp/ops.key" "$tmp/agent.yaml"
"$klock" verify -k "$tmp/ops.pub" "$tmp/agent.yaml"
sed -i 's/max_cost: "2.00 USD"/max_cost: "20.00 USD"/' "$tmp/agent.yaml"
"$klock" verify -k "$tmp/ops.pub" "$tmp/agent.yaml" || echo "(a changed manifest no longer verifies, as it should)"
