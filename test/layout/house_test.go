package layout

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxFuncLines bounds a hand-written function's body: one screen to read
// it in. A long string literal (a cobra command's help text) does not
// count: it is prose, read as such.
const maxFuncLines = 120

// maxReadmeLines bounds the README: the page a newcomer reads in five
// minutes; the reference lives in docs/.
const maxReadmeLines = 200

// TestFunctionsFitOnAScreen: no non-test Go function of the module (bpf2go's
// generated files aside) is longer than maxFuncLines, help texts aside.
func TestFunctionsFitOnAScreen(t *testing.T) {
	walkSources(t, func(rel, p string) {
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || generated(p) {
			return
		}
		for _, f := range longFuncs(t, p) {
			t.Errorf("%s: %s", rel, f)
		}
	})
}

// walkSources calls f with every file of the module (node_modules and
// hidden directories aside), by its path relative to the module and its
// path.
func walkSources(t *testing.T, f func(rel, p string)) {
	t.Helper()
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || strings.HasPrefix(n, ".") && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f(rel, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// longFuncs lists p's functions over maxFuncLines, with their length.
func longFuncs(t *testing.T, p string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	var out []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		n := fset.Position(fn.Body.Rbrace).Line - fset.Position(fn.Body.Lbrace).Line + 1 - literalLines(fset, fn.Body)
		if n > maxFuncLines {
			out = append(out, fn.Name.Name+" has "+strconv.Itoa(n)+" lines (at most "+strconv.Itoa(maxFuncLines)+": split it into its phases)")
		}
	}
	return out
}

// literalLines counts the lines string literals in n span beyond their
// first.
func literalLines(fset *token.FileSet, n ast.Node) int {
	lines := 0
	ast.Inspect(n, func(x ast.Node) bool {
		if lit, ok := x.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			lines += fset.Position(lit.End()).Line - fset.Position(lit.Pos()).Line
		}
		return true
	})
	return lines
}

// generated reports whether p says it is generated (bpf2go's loaders).
func generated(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for i := 0; i < 5 && s.Scan(); i++ {
		if strings.HasPrefix(s.Text(), "// Code generated") {
			return true
		}
	}
	return false
}

// TestReadmeOnboards: README.md stays the five-minute page.
func TestReadmeOnboards(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, at most %d: the reference belongs in docs/", n, maxReadmeLines)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", dir, err)
	}
	return dir
}

// issueRef is a reference to an issue by number.
var issueRef = regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)

// TestCommentsCiteNoIssueNumbers: the code's comments say what they rely
// on (the spec section, the doc, the behaviour): an issue number is
// nothing a reader of the code can look up.
func TestCommentsCiteNoIssueNumbers(t *testing.T) {
	walkSources(t, func(rel, p string) {
		switch filepath.Ext(p) {
		case ".go", ".c", ".h", ".sh":
		default:
			return
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if issueRef.MatchString(line) {
				t.Errorf("%s:%d cites an issue number: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// docPath is a source file a doc names: a path with a directory and a
// source extension, in backquotes.
var docPath = regexp.MustCompile("`([a-z0-9_./-]+/[a-z0-9_.-]+\\.(?:go|c|h))`")

// TestDocsNameFilesThatExist: every source file docs/architecture.md and
// the README name exists, so the walk from the kernel to the log is one a
// newcomer can follow.
func TestDocsNameFilesThatExist(t *testing.T) {
	root := moduleRoot(t)
	for _, doc := range []string{"docs/architecture.md", "README.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range docPath.FindAllStringSubmatch(string(b), -1) {
			n++
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s names %s: %v", doc, m[1], err)
			}
		}
		if doc == "docs/architecture.md" && n < 10 {
			t.Errorf("%s names %d source files; its walk of one file open names each step's", doc, n)
		}
	}
}
