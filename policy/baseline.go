package policy

// systemRO is what a dynamically linked program needs to read to start and
// do ordinary work: libraries, the loader cache, locale and time zone data,
// name-service files, certificates, the harmless device nodes, and the
// process's own /proc entries. Nothing here is writable except the null
// sinks, and nothing is executable: executables are declared as PROC.
var systemRO = []string{
	"CONSUMES FILE:/usr/**",
	"CONSUMES FILE:/lib/**",
	"CONSUMES FILE:/lib64/**",
	"CONSUMES FILE:/bin/**",
	"CONSUMES FILE:/sbin/**",
	"CONSUMES FILE:/etc/ld.so.cache",
	"CONSUMES FILE:/etc/ld.so.conf",
	"CONSUMES FILE:/etc/ld.so.conf.d/**",
	"CONSUMES FILE:/etc/ld.so.preload",
	"CONSUMES FILE:/etc/localtime",
	"CONSUMES FILE:/etc/timezone",
	"CONSUMES FILE:/etc/locale.alias",
	"CONSUMES FILE:/etc/nsswitch.conf",
	"CONSUMES FILE:/etc/passwd",
	"CONSUMES FILE:/etc/group",
	"CONSUMES FILE:/etc/hosts",
	"CONSUMES FILE:/etc/host.conf",
	"CONSUMES FILE:/etc/resolv.conf",
	"CONSUMES FILE:/etc/gai.conf",
	"CONSUMES FILE:/etc/services",
	"CONSUMES FILE:/etc/protocols",
	"CONSUMES FILE:/etc/mime.types",
	"CONSUMES FILE:/etc/ssl/**",
	"CONSUMES FILE:/etc/ca-certificates/**",
	"CONSUMES FILE:/etc/alternatives/**",
	"CONSUMES FILE:/etc/terminfo/**",
	"CONSUMES FILE:/etc/inputrc",
	"CONSUMES FILE:/etc/bash.bashrc",
	"CONSUMES FILE:/etc/profile",
	// glibc asks nscd first for users, groups and hosts (a read-only lookup).
	"CONSUMES FILE:/run/nscd/socket",
	"CONSUMES FILE:/var/run/nscd/socket",
	"CONSUMES FILE:/dev/zero",
	"CONSUMES FILE:/dev/random",
	"CONSUMES FILE:/dev/urandom",
	"MUTATES FILE:/dev/null",
	"MUTATES FILE:/dev/full",
	"MUTATES FILE:/dev/tty",
	"CONSUMES FILE:/proc/self/**",
	"CONSUMES FILE:/proc/thread-self/**",
	"CONSUMES FILE:/proc/meminfo",
	"CONSUMES FILE:/proc/cpuinfo",
	"CONSUMES FILE:/proc/stat",
	"CONSUMES FILE:/proc/filesystems",
	// Kernel settings runtimes read to size themselves: V8 (node) and
	// jemalloc the overcommit policy, Go's and others' listen backlog,
	// glibc's sysconf(_SC_NGROUPS_MAX).
	"CONSUMES FILE:/proc/sys/vm/overcommit_memory",
	"CONSUMES FILE:/proc/sys/net/core/somaxconn",
	"CONSUMES FILE:/proc/sys/kernel/ngroups_max",
	"CONSUMES FILE:/sys/devices/system/cpu/**",
	// Runtimes (Go, JVM, .NET) size themselves from their cgroup's limits.
	"CONSUMES FILE:/sys/fs/cgroup/**",
	"CONSUMES FILE:/sys/kernel/mm/transparent_hugepage/**",
}

// elfInterpreters are the dynamic loaders. The kernel opens them for exec
// on behalf of a declared binary (PT_INTERP); executing one directly would
// run any binary by name ("ld.so /tmp/x"), so they are never exec targets.
var elfInterpreters = []string{
	"/lib64/ld-linux-x86-64.so.2",
	"/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	"/usr/lib64/ld-linux-x86-64.so.2",
	"/lib/ld-linux-aarch64.so.1",
	"/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
	"/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
}

// libraryDirs are where the system's shared objects live: the dynamic
// loader maps every dynamic program's libraries executable from there, and
// python and node their extension modules. A file wall that decides
// executable mappings (bpf-lsm) allows a mapping of a file there without a
// PROC intent (Ruleset.MapsExec); anywhere else, mapping a file's code
// needs the PROC intent its exec would. Reading them is already in
// systemRO (/usr/**, /lib/**, /lib64/**).
var libraryDirs = []string{
	"/usr/lib/**",
	"/usr/lib64/**",
	"/usr/local/lib/**",
	"/lib/**",
	"/lib64/**",
}

func baselineIntents(b Baseline) []Intent {
	if b != BaselineSystemRO {
		return nil
	}
	out := make([]Intent, 0, len(systemRO))
	for _, s := range systemRO {
		in, err := ParseIntent(s)
		if err != nil {
			panic("policy: bad baseline intent " + s + ": " + err.Error())
		}
		in.Origin = "baseline:" + string(b)
		out = append(out, in)
	}
	return out
}
