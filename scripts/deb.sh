#!/usr/bin/env bash
# make deb: bin/klock_<version>_<arch>.deb with dpkg-deb, from make
# install's layout with PREFIX=/usr into a staging directory, plus
# deploy/debian (control, conffiles, maintainer scripts).
# Usage: scripts/deb.sh OUT.deb VERSION ARCH
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 OUT.deb VERSION ARCH" >&2; exit 2; }
out=$1 version=$2 arch=$3
top="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d "$top/bin/.deb-XXXXXX")"
trap 'rm -rf "$stage"' EXIT
"$top/scripts/install.sh" install "$stage" /usr/bin /usr/lib/systemd/system /usr/share/man /usr/share /etc
# Debian's man pages are compressed (policy 12.1).
find "$stage/usr/share/man" -type f -name '*.[18]' -exec gzip -9n {} +
install -d -m 0755 "$stage/DEBIAN" "$stage/usr/share/doc/klock"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" "$top/deploy/debian/control.in" >"$stage/DEBIAN/control"
install -m 0644 "$top/deploy/debian/conffiles" "$stage/DEBIAN/conffiles"
install -m 0755 "$top/deploy/debian/postinst" "$top/deploy/debian/prerm" "$top/deploy/debian/postrm" "$stage/DEBIAN/"
gzip -9n <"$top/README.md" >"$stage/usr/share/doc/klock/README.md.gz"
chmod -R u+rwX,go+rX,go-w "$stage"
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "klock: built $out" >&2
