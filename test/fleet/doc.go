// Package fleet tests klock's fleet on etcd with real etcd server
// processes on loopback (internal/etcdtest) and real sessions: what a
// session does when the fleet's etcd stops answering. It runs on the host
// only: the VM has no etcd, and nothing here depends on the kernel's LSM.
package fleet
