package deploy

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// root is the module's root directory (this file is test/deploy/).
func root(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// documents reads a YAML file of one or more documents ("---").
func documents(t *testing.T, rel string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// strict decodes one document into v: unknown and duplicate fields are
// errors, and the document's apiVersion and kind must be want's.
func strict(t *testing.T, rel string, doc []byte, v any, apiVersion, kind string) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if tm.APIVersion != apiVersion || tm.Kind != kind {
		t.Fatalf("%s: %s %s, want %s %s", rel, tm.APIVersion, tm.Kind, apiVersion, kind)
	}
}

// ctdRuntime is a runtime of containerd's CRI plugin (containerd 1.6's
// pkg/cri/config Runtime, the fields the handler sets).
type ctdRuntime struct {
	RuntimeType          string   `toml:"runtime_type"`
	PodAnnotations       []string `toml:"pod_annotations"`
	ContainerAnnotations []string `toml:"container_annotations"`
	Options              struct {
		BinaryName string
	} `toml:"options"`
}

type ctdConfig struct {
	Version int `toml:"version"`
	Plugins struct {
		CRI struct {
			Containerd struct {
				Runtimes map[string]ctdRuntime `toml:"runtimes"`
			} `toml:"containerd"`
		} `toml:"io.containerd.grpc.v1.cri"`
	} `toml:"plugins"`
}

const handlerFile = "deploy/containerd/klock-runtime.toml"

func containerdHandler(t *testing.T) ctdConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), handlerFile))
	if err != nil {
		t.Fatal(err)
	}
	var c ctdConfig
	d := toml.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		t.Fatalf("%s: %v", handlerFile, err)
	}
	if c.Version != 2 {
		t.Fatalf("%s: version %d, want 2 (containerd 1.6/1.7's plugin names)", handlerFile, c.Version)
	}
	return c
}

// single decodes a file of one document into a T.
func single[T any](t *testing.T, rel, apiVersion, kind string) *T {
	t.Helper()
	docs := documents(t, rel)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", rel, len(docs))
	}
	v := new(T)
	strict(t, rel, docs[0], v, apiVersion, kind)
	return v
}

func runtimeClass(t *testing.T) *nodev1.RuntimeClass {
	return single[nodev1.RuntimeClass](t, "deploy/kubernetes/runtimeclass.yaml", "node.k8s.io/v1", "RuntimeClass")
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	return single[appsv1.DaemonSet](t, "deploy/kubernetes/daemonset.yaml", "apps/v1", "DaemonSet")
}

// The RuntimeClass's handler is containerd's klock runtime: the runc shim
// running klock-runtime, with klock's annotations let through.
func TestHandlerNamesMatch(t *testing.T) {
	rc := runtimeClass(t)
	if errs := validation.IsDNS1123Label(rc.Handler); len(errs) > 0 {
		t.Fatalf("handler %q: %v (the CRI's runtime_handler must be a DNS label)", rc.Handler, errs)
	}
	c := containerdHandler(t)
	rt, ok := c.Plugins.CRI.Containerd.Runtimes[rc.Handler]
	if !ok {
		t.Fatalf("the RuntimeClass's handler %q is not a runtime in %s (%v)", rc.Handler, handlerFile, c.Plugins.CRI.Containerd.Runtimes)
	}
	if rt.RuntimeType != "io.containerd.runc.v2" || filepath.Base(rt.Options.BinaryName) != "klock-runtime" {
		t.Fatalf("runtime %q: %+v, want the runc v2 shim running klock-runtime", rc.Handler, rt)
	}
	for _, l := range [][]string{rt.PodAnnotations, rt.ContainerAnnotations} {
		if !slices.Contains(l, "io.klock.*") {
			t.Fatalf("runtime %q lets %v through, want io.klock.* (containerd drops the rest)", rc.Handler, l)
		}
	}
}

// The DaemonSet installs klock-runtime where the handler runs it, and runs
// on the nodes the RuntimeClass schedules onto.
func TestDaemonSetServesTheHandler(t *testing.T) {
	rc, ds := runtimeClass(t), daemonSet(t)
	rt := containerdHandler(t).Plugins.CRI.Containerd.Runtimes[rc.Handler]
	spec := ds.Spec.Template.Spec
	if rc.Scheduling == nil || !maps.Equal(rc.Scheduling.NodeSelector, spec.NodeSelector) {
		t.Fatalf("RuntimeClass nodeSelector %+v, DaemonSet %v: pods of the class must land where klockd runs", rc.Scheduling, spec.NodeSelector)
	}
	bin := hostPath(spec, "klock-bin")
	if len(spec.InitContainers) != 1 || filepath.Dir(rt.Options.BinaryName) != bin {
		t.Fatalf("BinaryName %s; the DaemonSet installs into %q", rt.Options.BinaryName, bin)
	}
	install := strings.Join(spec.InitContainers[0].Command, " ")
	for _, b := range []string{"klock-runtime", "klock", "klock-stage2"} {
		if !strings.Contains(install, "/usr/local/bin/"+b+" ") {
			t.Errorf("the install container does not copy %s: %s", b, install)
		}
	}
	if m := mountAt(spec.InitContainers[0], "klock-bin"); m != bin {
		t.Errorf("the install container mounts klock-bin at %q, want %q", m, bin)
	}
	sel := ds.Spec.Selector.MatchLabels
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
}

// klockd runs with the node's pids, network and paths: the kernel
// backends, the containers' cgroups, its socket where the hooks dial it,
// its sessions and backups, and the workdirs.
func TestDaemonSetSeesTheNode(t *testing.T) {
	ds := daemonSet(t)
	spec := ds.Spec.Template.Spec
	if !spec.HostPID || !spec.HostNetwork {
		t.Fatalf("hostPID %v hostNetwork %v, want both", spec.HostPID, spec.HostNetwork)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want klockd alone", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Fatalf("klockd is not privileged: %+v", c.SecurityContext)
	}
	if !slices.Contains(c.Command, "/usr/local/bin/klockd") {
		t.Errorf("command %v does not run klockd", c.Command)
	}
	for _, p := range []string{"/sys/fs/bpf", "/sys/fs/cgroup", "/run/klock", "/var/lib/klock", "/srv/klock", "/etc/klock"} {
		found := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == p {
				found = true
				if hp := hostPath(spec, m.Name); hp != p {
					t.Errorf("%s is the node's %q; klock needs the node's path at the same path", p, hp)
				}
			}
		}
		if !found {
			t.Errorf("klockd does not mount the node's %s", p)
		}
	}
}

// The namespace and ServiceAccount the DaemonSet names exist.
func TestNamespaceAndServiceAccount(t *testing.T) {
	const rel = "deploy/kubernetes/namespace.yaml"
	docs := documents(t, rel)
	if len(docs) != 2 {
		t.Fatalf("%s: %d documents, want a Namespace and a ServiceAccount", rel, len(docs))
	}
	var ns corev1.Namespace
	var sa corev1.ServiceAccount
	strict(t, rel, docs[0], &ns, "v1", "Namespace")
	strict(t, rel, docs[1], &sa, "v1", "ServiceAccount")
	ds := daemonSet(t)
	if ds.Namespace != ns.Name || sa.Namespace != ns.Name || ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Fatalf("DaemonSet %s/%s (account %s), Namespace %s, ServiceAccount %s/%s",
			ds.Namespace, ds.Name, ds.Spec.Template.Spec.ServiceAccountName, ns.Name, sa.Namespace, sa.Name)
	}
}

// A misspelt field fails the strict decoding the tests rely on.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	var rc nodev1.RuntimeClass
	if err := yaml.UnmarshalStrict([]byte("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: klock}\nhandlr: klock\n"), &rc); err == nil {
		t.Fatal("a RuntimeClass with `handlr` decoded")
	}
	var c ctdConfig
	d := toml.NewDecoder(strings.NewReader("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.klock]\nruntime_typ = \"x\"\n"))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err == nil {
		t.Fatal("a runtime with `runtime_typ` decoded")
	}
}

func hostPath(spec corev1.PodSpec, volume string) string {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

func mountAt(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}
