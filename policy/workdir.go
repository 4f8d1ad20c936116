package policy

import "strings"

// RootRemovable reports whether a kernel wall may let the agent remove or
// rename the directory a subtree pattern ("dir/**") is rooted at. That is
// a right on the parent directory, and a Landlock rule grants it over the
// parent's whole hierarchy: for "${workdir}/build/**" that is the workdir
// (which klock backs up anyway), but for "/tmp/**" it would be the whole
// file system and for "${workdir}/**" everything beside the workdir
// (a home directory), which would also have to be backed up before every
// session. So the right is granted only when the parent lies inside the
// workdir; elsewhere the wall narrows the declaration (the directory
// itself stays; everything below it can go) and says so. Both the
// Landlock plan (enforcer/launch) and the backup's scopes (snapshot)
// decide with this, so they cannot disagree.
func (rs *Ruleset) RootRemovable(p PathPattern) bool {
	if p.Match != MatchSubtree || rs.Workdir == "" || p.Path == "/" {
		return false
	}
	parent := p.Path[:strings.LastIndexByte(p.Path, '/')]
	wd := strings.TrimSuffix(rs.Workdir, "/")
	return parent == wd || strings.HasPrefix(parent, wd+"/")
}
