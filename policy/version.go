package policy

import "go.yaml.in/yaml/v3"

// Version is a version label. Seed 002 writes version: 2, which YAML reads
// as a number; a label is kept as the text written (2, 2.0 and "2.0.1" all
// read as written), never as a number that would drop "2.10"'s zero.
type Version string

func (v *Version) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!bool" || n.ShortTag() == "!!null" && n.Value != "" {
		d.fail(n, path, "type", "write a version such as 2 or \"1.4.0\"", "want a version, got %s", kindName(n))
		return
	}
	*v = Version(n.Value)
}
