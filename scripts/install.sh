#!/usr/bin/env bash
# make install / make uninstall: lays klock out under DESTDIR.
# Usage: scripts/install.sh install|uninstall DESTDIR BINDIR UNITDIR MANDIR SHAREDIR SYSCONFDIR
#   the five binaries      BINDIR (klock-stage2 beside klock and klockd,
#                          klock-cli beside klock, which runs it for every
#                          command but a klock run klockd serves:
#                          they launch it from their own directory)
#   klockd.service/.socket UNITDIR (ExecStart= pointed at BINDIR)
#   klockd.yaml            SYSCONFDIR/klock, never over an existing one;
#                          SYSCONFDIR/klock/trust for trusted keys
#   completions            SHAREDIR/{bash-completion/completions/klock,
#                          zsh/site-functions/_klock,
#                          fish/vendor_completions.d/klock.fish}, made by
#                          klock completion
#   man pages              MANDIR/man1 (klock gen-man, from the commands)
#                          and MANDIR/man8/klockd.8 (deploy/man)
# Without DESTDIR (a real install) it also creates the klock group when
# missing and has systemd re-read its units when systemd runs. uninstall
# leaves SYSCONFDIR/klock, /var/lib/klock (backups a rollback may need) and
# the group.
set -euo pipefail
[ $# -eq 7 ] || { echo "usage: $0 install|uninstall DESTDIR BINDIR UNITDIR MANDIR SHAREDIR SYSCONFDIR" >&2; exit 2; }
action=$1 dest=$2 bindir=$3 unitdir=$4 mandir=$5 share=$6 etc=$7
top="$(cd "$(dirname "$0")/.." && pwd)"
bins=(klock klock-cli klockd klock-stage2 klock-runtime)
bash_c=$share/bash-completion/completions/klock
zsh_c=$share/zsh/site-functions/_klock
fish_c=$share/fish/vendor_completions.d/klock.fish

systemd_reload() {
	if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
}

do_install() {
	local b
	install -d "$dest$bindir" "$dest$unitdir" "$dest$mandir/man1" "$dest$mandir/man8" "$dest$etc/klock/trust" \
		"$(dirname "$dest$bash_c")" "$(dirname "$dest$zsh_c")" "$(dirname "$dest$fish_c")"
	for b in "${bins[@]}"; do
		install -m 0755 "$top/bin/$b" "$dest$bindir/$b"
	done
	sed "s|^ExecStart=/usr/local/bin/|ExecStart=$bindir/|" "$top/deploy/systemd/klockd.service" >"$dest$unitdir/klockd.service"
	install -m 0644 "$top/deploy/systemd/klockd.socket" "$dest$unitdir/klockd.socket"
	chmod 0644 "$dest$unitdir/klockd.service"
	# The admin's configuration is never replaced.
	if [ -e "$dest$etc/klock/klockd.yaml" ]; then
		echo "klock: keeping $dest$etc/klock/klockd.yaml (the new default: $top/deploy/etc/klockd.yaml)" >&2
	else
		install -m 0644 "$top/deploy/etc/klockd.yaml" "$dest$etc/klock/klockd.yaml"
	fi
	"$top/bin/klock" completion bash >"$dest$bash_c"
	"$top/bin/klock" completion zsh >"$dest$zsh_c"
	"$top/bin/klock" completion fish >"$dest$fish_c"
	chmod 0644 "$dest$bash_c" "$dest$zsh_c" "$dest$fish_c"
	"$top/bin/klock" gen-man "$dest$mandir/man1"
	install -m 0644 "$top/deploy/man/klockd.8" "$dest$mandir/man8/klockd.8"
	if [ -z "$dest" ] && ! getent group klock >/dev/null; then
		groupadd --system klock
		echo "klock: created the system group klock (its members may use klockd)" >&2
	fi
	systemd_reload
}

do_uninstall() {
	local b
	for b in "${bins[@]}"; do rm -f "$dest$bindir/$b"; done
	rm -f "$dest$unitdir/klockd.service" "$dest$unitdir/klockd.socket" "$dest$bash_c" "$dest$zsh_c" "$dest$fish_c" \
		"$dest$mandir/man8/klockd.8" "$dest$mandir"/man1/klock.1 "$dest$mandir"/man1/klock-*.1
	systemd_reload
}

case "$action" in
install) do_install ;;
uninstall) do_uninstall ;;
*) echo "usage: $0 install|uninstall ..." >&2; exit 2 ;;
esac
