// Package install tests klock as installed: make install into a DESTDIR
// (the layout, systemd-analyze verify of the units as installed, the
// configuration never replaced, make uninstall, bash loading the
// completions), and make deb's package installed with dpkg -i into a clean
// Debian root made by debootstrap --variant=minbase from this machine's
// apt sources, where klock doctor runs and the completions complete.
//
// The Debian root is cached as a tarball under $KLOCK_TEST_CACHE
// (default /var/cache/klock-test), keyed by suite, so only the first run
// on a machine pays debootstrap (about 30 s with a near mirror).
package install
