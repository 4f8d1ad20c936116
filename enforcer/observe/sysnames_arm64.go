//go:build linux

package observe

var legacyNames = map[int32]string{}
