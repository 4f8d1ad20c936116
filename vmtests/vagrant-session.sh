#!/usr/bin/env bash
# The Vagrant VM's example: the demo agent in permissive mode on the bpf-lsm
# backend. Each undeclared operation is refused before its effect, logged,
# and the scope amended (Dynamic Lease Acquisition); --learn writes the
# manifest that would have allowed the run. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
klock=${KLOCK:-$(command -v klock || echo bin/klock)}
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
demo=/var/tmp/klock-vagrant
rm -rf "$demo" && mkdir -p "$demo/repo/src" "$demo/repo/config" "$demo/repo/build"
cp examples/demo/agent.sh "$demo/agent.sh"
sed "s|/var/tmp/klock-demo|$demo|g" examples/demo/agent.yaml >"$demo/agent.yaml"
echo "print('app')" >"$demo/repo/src/app.py"
printf 'name: demo\nport: 8080\n' >"$demo/repo/config/settings.yaml"
chmod 755 "$demo" "$demo/agent.sh"
chown -R 65534:65534 "$demo/repo"
"$klock" doctor | grep -E 'bpf-lsm|strict mode' || true
"$klock" run -m "$demo/agent.yaml" --mode permissive --backend auto --learn "$demo/learned.yaml" -- "$demo/agent.sh"
echo "--- the manifest that would have allowed this run: $demo/learned.yaml"
grep -A3 'lease' "$demo/learned.yaml" || sed -n '/intents:/,/^[a-z]/p' "$demo/learned.yaml"
