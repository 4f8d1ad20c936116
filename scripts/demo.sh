#!/usr/bin/env bash
# The demo: a real agent session under enforcement on this kernel, then the
# manifest tooling. Needs root (namespaces, cgroups, BPF).
set -euo pipefail
klock=$(realpath "${1:-bin/klock}")
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "make demo runs a real enforced session: run it as root (sudo make demo)" >&2; exit 1; }

demo=/var/tmp/klock-demo
rm -rf "$demo" && mkdir -p "$demo/repo/src" "$demo/repo/config" "$demo/repo/build"
cp examples/demo/agent.sh "$demo/agent.sh"
cp examples/demo/agent.yaml "$demo/agent.yaml"
echo "print('app')" > "$demo/repo/src/app.py"
printf 'name: demo\nport: 8080\n' > "$demo/repo/config/settings.yaml"
chmod 755 "$demo" "$demo/agent.sh"
chown -R 65534:65534 "$demo/repo"   # the agent runs as the workdir's owner, never root

step "What this kernel can enforce"
"$klock" doctor || true

step "The manifest: edit src/, build into build/, only read config/"
"$klock" explain "$demo/agent.yaml" | sed -n '/^Intents/,/^$/p'

snap() { (cd "$demo/repo" && find . -path ./.klock -prune -o -type f -printf '%M %p\n' | sort && md5sum src/app.py config/settings.yaml); }
before=$(snap)

step "Run the agent under klock (strict mode)"
set +e
"$klock" run -m "$demo/agent.yaml" --allow-degraded -- "$demo/agent.sh"
status=$?
set -e
echo "klock run exited with $status (113: strict mode killed the session for a scope violation)"

step "The files afterwards"
after=$(snap)
diff <(echo "$before") <(echo "$after") && echo "(identical to before the session)" || true

step "The verification log, again, from disk"
id=$(ls -t "$demo/repo/.klock/sessions" | sed -n 1p)
"$klock" log -m "$demo/agent.yaml" "$id" | sed -n '1,12p'
"$klock" log -m "$demo/agent.yaml" --html "$id" >"$demo/report.html"
echo "the same as a page to open in a browser (timeline, violation, restored files): $demo/report.html"

step "Manifest tooling: a manifest with mistakes is rejected, each problem located"
"$klock" validate examples/manifests/invalid/unknown-field.yaml examples/manifests/invalid/float-money-units.yaml \
	examples/manifests/invalid/unenforceable-path.yaml || true

step "The refund agent of seed 002: its permissions matrix"
"$klock" explain examples/manifests/refund-agent.yaml | sed -n '/^Permissions/,/^$/p'
